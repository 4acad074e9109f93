// Finding a model directory.
//
// ResolveModelDir(model, env) tries, in order:
//   1. `model` names an existing directory -> that directory;
//   2. `model` is empty or the default id, and DEEPINFER_HF_MODEL_DIR is set -> that
//      directory (NotFound if it does not exist);
//   3. `model` (empty = kDefaultModelId) as a Hugging Face id "org/name" in the HF cache:
//      $HF_HUB_CACHE, else $HF_HOME/hub, else $HOME/.cache/huggingface/hub; then
//      models--org--name/snapshots/<rev>/ with <rev> read from refs/main, or the only
//      snapshot when refs/main is absent.
// Errors say which places were tried.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

#include "base/statusor.h"

namespace deepinfer::io {

inline constexpr std::string_view kDefaultModelId = "deepseek-ai/DeepSeek-V4.1-Flash-1017";

// The environment variables used by resolution (injectable for tests).
struct ResolveEnv {
  std::optional<std::string> deepinfer_hf_model_dir;  // DEEPINFER_HF_MODEL_DIR
  std::optional<std::string> hf_hub_cache;            // HF_HUB_CACHE
  std::optional<std::string> hf_home;                 // HF_HOME
  std::optional<std::string> home;                    // HOME
  static ResolveEnv FromProcess();
};

base::StatusOr<std::filesystem::path> ResolveModelDir(std::string_view model,
                                                      const ResolveEnv& env);

// The HF hub cache root for `env` (see above).
base::StatusOr<std::filesystem::path> HfHubCacheDir(const ResolveEnv& env);

}  // namespace deepinfer::io

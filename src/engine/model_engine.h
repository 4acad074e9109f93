// Loading a V4.1 checkpoint (or the embedded demo model) on a backend and building an
// Engine over it: shared by `deepinfer generate`, examples/ and bench/engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/factory.h"
#include "base/statusor.h"
#include "engine/engine.h"
#include "model/backend.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::engine {

struct LoadedModel {
  std::string dir;
  std::unique_ptr<model::Backend> backend;
  std::unique_ptr<model::Model> model;  // uses *backend
  // dir/tokenizer.json; null if it cannot be loaded (then only token-id prompts work).
  std::unique_ptr<tokenizer::Tokenizer> tokenizer;
};

// Loads `dir` (config.json, checkpoint, tokenizer.json; Engram constants derived from the
// tokenizer). `dir` may also be a Hugging Face id found in the HF cache (io::ResolveModelDir).
// An empty `dir` means $DEEPINFER_HF_MODEL_DIR when set, else the embedded demo model
// (generated into the cache on first use, model::EnsureDemoModel). `backend` names the compute
// backend (backend::CreateBackend: "cpu", "cuda", "cuda:N"). Errors name the directory or the
// backend.
base::StatusOr<LoadedModel> LoadModelForEngine(const std::string& dir,
                                               const std::string& backend = "cpu",
                                               const backend::BackendOptions& options = {});

struct ModelEngineOptions {
  int32_t num_slots = 16;             // concurrently running sequences
  int32_t max_tokens_per_step = 256;  // chunked-prefill budget (raised to num_slots if lower)
  int64_t max_model_len = 4096;
  int block_tokens = 16;
  int32_t num_blocks = 0;  // 0: enough for every slot to reach max_model_len
  uint64_t seed = 0;
};

// An Engine running `loaded` (which must outlive it) with a ModelRunnerV41.
base::StatusOr<std::unique_ptr<Engine>> MakeModelEngine(const LoadedModel& loaded,
                                                        const ModelEngineOptions& options);

}  // namespace deepinfer::engine

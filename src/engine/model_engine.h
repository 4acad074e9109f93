// Loading a V4.1 checkpoint (or the embedded demo model) on a backend and building an
// Engine over it: shared by `deepinfer generate`, examples/ and bench/engine.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

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

// The engine's tokens per step (the chunked-prefill budget, decode tokens included) when the
// user sets none: kCudaStepTokenBudget on a CUDA backend ("cuda", "cuda:N"), where prompt
// chunks must be large for the prefill paths to pay (the FP8 mode's block-128 Linears start
// at 512 token rows, its wgmma experts want thousands); kCpuStepTokenBudget elsewhere. H200,
// FP8 mode, the 4-layer bench checkpoint (bench/gpu/RESULTS.md, run 146), prefill through the
// engine at budgets 512 / 2048 / 8192: 4k prompt 26.4k / 45.6k / 53.8k tok/s, 16k prompt
// 24.1k / 39.7k / 50.4k tok/s.
inline constexpr int32_t kCudaStepTokenBudget = 8192;
inline constexpr int32_t kCpuStepTokenBudget = 512;
int32_t DefaultStepTokenBudget(std::string_view backend);

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

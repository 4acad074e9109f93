#include "engine/model_engine.h"

#include <algorithm>
#include <filesystem>

#include "backend/factory.h"
#include "base/logging.h"
#include "engine/model_runner_v41.h"
#include "fmt/format.h"
#include "io/model_resolve.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"

namespace deepinfer::engine {

base::StatusOr<LoadedModel> LoadModelForEngine(const std::string& dir_arg,
                                               const std::string& backend_name,
                                               const backend::BackendOptions& options) {
  LoadedModel out;
  const io::ResolveEnv env = io::ResolveEnv::FromProcess();
  if (dir_arg.empty() && !env.deepinfer_hf_model_dir) {
    DI_ASSIGN_OR_RETURN(out.dir, model::EnsureDemoModel());
  } else {  // a directory, DEEPINFER_HF_MODEL_DIR, or a Hugging Face id in the HF cache
    DI_ASSIGN_OR_RETURN(const std::filesystem::path resolved, io::ResolveModelDir(dir_arg, env));
    out.dir = resolved.string();
  }
  const std::filesystem::path dir(out.dir);
  const std::string tokenizer_path = (dir / "tokenizer.json").string();
  DI_ASSIGN_OR_RETURN(io::ModelConfig config, io::LoadModelConfig(dir / "config.json"));
  std::optional<model::EngramHashConstants> engram;
  if (!config.text_config.engram_layer_ids.empty()) {
    auto derived = model::DeriveEngramHashConstants(config.text_config, tokenizer_path);
    if (!derived.ok()) return derived.status().WithContext(fmt::format("model {}", out.dir));
    engram = std::move(*derived);
  }
  DI_ASSIGN_OR_RETURN(out.backend, backend::CreateBackend(backend_name, options));
  auto m = model::Model::Load(dir, out.backend.get(), std::move(engram));
  if (!m.ok()) return m.status().WithContext(fmt::format("model {}", out.dir));
  out.model = std::move(*m);
  auto tok = tokenizer::Tokenizer::FromFile(tokenizer_path);
  if (tok.ok()) {
    out.tokenizer = std::move(*tok);
  } else {  // e.g. the goldens' WordLevel tokenizers: token ids still work
    LOG_WARN("model {}: no usable tokenizer, token ids only: {}", out.dir, tok.status().ToString());
  }
  return out;
}

int32_t DefaultStepTokenBudget(std::string_view backend) {
  return backend::IsCudaBackendName(backend) ? kCudaStepTokenBudget : kCpuStepTokenBudget;
}

base::StatusOr<std::unique_ptr<Engine>> MakeModelEngine(const LoadedModel& loaded,
                                                        const ModelEngineOptions& options) {
  const io::ModelConfig& config = loaded.model->config();
  EngineConfig c;
  DI_ASSIGN_OR_RETURN(c.layout, StateLayoutForModel(config, options.block_tokens));
  c.num_slots = options.num_slots;
  const int64_t per_seq = (options.max_model_len + options.block_tokens - 1) / options.block_tokens;
  c.num_blocks =
      options.num_blocks > 0
          ? options.num_blocks
          : static_cast<int32_t>(std::min<int64_t>(per_seq * options.num_slots, 1 << 30));
  c.scheduler.max_tokens_per_step = std::max(options.max_tokens_per_step, options.num_slots);
  c.scheduler.max_model_len = options.max_model_len;
  c.scheduler.eos_token_ids = {static_cast<TokenId>(config.eos_token_id)};
  c.scheduler.seed = options.seed;
  DI_RETURN_IF_ERROR(loaded.model->StateBlockFloats(options.block_tokens).status());
  auto runner =
      std::make_unique<ModelRunnerV41>(loaded.model.get(), loaded.backend.get(), options.num_slots,
                                       options.block_tokens, c.num_blocks);
  return Engine::Create(std::move(c), std::move(runner));
}

}  // namespace deepinfer::engine

// The embedded demo model: a small random-weight DeepSeek-V4.1 checkpoint in the release's
// native format (config.json with text_config + vision_config, model.safetensors + index,
// the real V4.1 tokenizer), deterministic from a seed.
//
// Every architectural feature of V4.1 is present: ratio-0 / ratio-2 / ratio-1 layers, two
// ratio-2 KV-source groups and a ratio-1 group, index sources with a candidate source and a
// re-index layer, Engram on a plain layer and on a KV-source layer (constants derived from
// the real tokenizer), MoE with a shared expert, 4-stream mHC, FP8 / MXFP4 / BF16 / F32
// storage like the release. Its output is random text: it exists so that the CLI, server and
// benchmarks run without downloading the real ~510 GB checkpoint (docs/demo-model.md).
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/statusor.h"
#include "io/model_config.h"

namespace deepinfer::model {

// Bump when the generator's output changes (names the cache directory).
inline constexpr int kDemoModelVersion = 1;

// The sizes that vary between the demo and the (benchmark-only) medium model. The layer
// schedule is fixed: compress_ratios [0,0,2,2,2,2,1,1], KV sources 2,4,6, index sources
// 2,4,6,7 (candidate source 6, re-index layer 7), Engram layers 1 and 4.
struct DemoModelSize {
  int64_t hidden_size = 256;
  int num_attention_heads = 4;
  int64_t head_dim = 128;
  int64_t qk_rope_head_dim = 32;
  int64_t q_lora_rank = 128;
  int o_groups = 2;
  int64_t o_lora_rank = 128;
  int n_routed_experts = 8;
  int num_experts_per_tok = 2;
  int64_t moe_intermediate_size = 128;
  int64_t sliding_window = 32;
  int index_n_heads = 4;
  int64_t index_head_dim = 64;
  int64_t index_topk = 16;
  int64_t candidate_topk_blocks = 4;
  int64_t candidate_block_size = 8;
  int engram_n_heads = 4;
  int64_t engram_head_dim = 32;
  int64_t engram_vocab_size = 4096;  // primes are drawn from here up

  static DemoModelSize Demo() { return {}; }
  // hidden 1024, 8 layers: for benchmarks.
  static DemoModelSize Medium();
};

struct DemoModelOptions {
  uint64_t seed = 0;
  DemoModelSize size = DemoModelSize::Demo();
  // The V4.1 tokenizer.json to ship (and to derive the Engram vocabulary from); empty =
  // tokenizer::DefaultTokenizerPath("deepseek-v4.1"). A tokenizer_config.json beside it is
  // copied too.
  std::string tokenizer_json;
};

inline constexpr int kDemoVocabSize = 129280;

// The composite config.json document. `compressed_vocab_size` is the tokenizer-derived
// Engram vocabulary (99092 for the real V4.1 tokenizer).
nlohmann::ordered_json DemoModelConfigJson(const DemoModelSize& size,
                                           int64_t compressed_vocab_size);

// Writes the checkpoint into `dir` (created; must not exist or be empty): config.json,
// generation_config.json, model.safetensors, model.safetensors.index.json, tokenizer.json
// (+ tokenizer_config.json). Same options -> byte-identical files.
base::Status WriteDemoModel(const std::filesystem::path& dir, const DemoModelOptions& options);

// The common start of a generated checkpoint (demo, benchmarks): creates `dir` (must not
// exist or be empty); derives the Engram vocabulary from `tokenizer_json` (empty = the bundled
// V4.1 tokenizer, which it must match: kDemoVocabSize tokens); builds config.json with
// make_config(compressed vocabulary size), validates it and writes it with
// generation_config.json (bos 0, eos 1) and tokenizer.json (+ tokenizer_config.json beside
// it). `label` names the checkpoint in errors. Returns the parsed config.
base::StatusOr<io::ModelConfig> StartGeneratedCheckpoint(
    const std::filesystem::path& dir, std::string tokenizer_json, std::string_view label,
    const std::function<nlohmann::ordered_json(int64_t)>& make_config);

// The cache root: $DEEPINFER_CACHE_DIR, else $XDG_CACHE_HOME/deepinfer, else
// $HOME/.cache/deepinfer.
base::StatusOr<std::filesystem::path> DeepinferCacheDir();

// The demo model's directory (<cache>/demo-v41-<kDemoModelVersion>), generated with the
// default options on first use. Generation goes to a temporary sibling directory that is
// renamed into place, so a directory that exists is complete; concurrent callers are safe.
base::StatusOr<std::string> EnsureDemoModel();

}  // namespace deepinfer::model

// The GPU benchmark's random-weight checkpoint (issue 9): DeepSeek-V4.1-Flash layer shapes,
// fewer layers, generated on the benchmark machine (never shipped).
//
// Preset "flash4": 4 layers with the release's layer kinds:
//   compress_ratios [0, 2, 1, 1], kv_source_layer_ids [1, 2], index_source_layer_ids
//   [1, 2, 3], candidate_source_layer_id 2 (layer 3 re-indexes), engram_layer_ids [0].
// Scale "real": the release's sizes (hidden 5120, 64 x 512 heads, 384 MXFP4 experts of 2304,
//   ...) with engram_vocab_size cut to 100000 (~2.4M table rows instead of 384M); ~32 GB.
// Scale "tiny": the same schedule at demo-model sizes (hidden 256, 8 experts), for tests.
//
// Storage is the release's (model.md §4): FP8 e4m3 + E8M0 32x32 block scales, MXFP4 experts
// (packed e2m1 + E8M0 per 32), FP8 Engram rows, BF16, F32. Values only have sane statistics:
// quantised codes come from small tables of quantised N(0,1) values and every scale of a
// tensor is the power of two that gives effective values a std of ~1/sqrt(K).
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/statusor.h"
#include "io/model_config.h"
#include "model/demo_model.h"
#include "tensor/dtype.h"

namespace deepinfer::bench {

enum class BenchScale { kReal, kTiny };

// "real" / "tiny"; InvalidArgument names the value otherwise.
base::StatusOr<BenchScale> ParseBenchScale(std::string_view text);
// Only "flash4" exists; InvalidArgument otherwise.
base::Status CheckBenchPreset(std::string_view preset);

// The varying sizes of a scale (the schedule is fixed, see above).
model::DemoModelSize BenchModelSize(BenchScale scale);

// config.json: the demo model's release-style document with the flash4 schedule and the
// scale's sizes. `compressed_vocab_size` is the tokenizer-derived Engram vocabulary.
nlohmann::ordered_json BenchModelConfigJson(BenchScale scale, int64_t compressed_vocab_size);

// How the bytes of one tensor are filled.
enum class FillKind {
  kFp8Codes,    // e4m3 codes from the N(0,1)*16 table
  kFp4Codes,    // two e2m1 nibbles per byte from the N(0,1)*2 table
  kConstByte,   // every byte = const_byte (E8M0 scales)
  kBf16Normal,  // center + stddev * N(0,1) (table), rounded to BF16
  kF32Normal,   // same, F32
};

struct PlannedTensor {
  std::string name;
  tensor::DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // in the data section (aligned to the element size)
  uint64_t bytes = 0;
  FillKind fill = FillKind::kConstByte;
  float center = 0.0f;
  float stddev = 0.0f;
  uint8_t const_byte = 0;
};

// Every tensor of io::ExpectedTensors(config), laid out (F32 first, then BF16, then 1-byte
// types, each in schema order) with its fill recipe, and the safetensors JSON header padded
// with spaces to a multiple of 8 (file = 8-byte length + header + data).
struct CheckpointPlan {
  std::vector<PlannedTensor> tensors;
  std::string header;
  uint64_t data_bytes = 0;
  uint64_t file_bytes() const { return 8 + header.size() + data_bytes; }
};
// The config must have passed ValidateModelConfig and be quantised.
CheckpointPlan PlanCheckpoint(const io::ModelConfig& config);

// Fills the data section (`data` = plan.data_bytes bytes; padding is left as is) with
// `threads` threads (<= 0: all cores). Deterministic in (plan, seed), whatever `threads`.
void FillCheckpoint(const CheckpointPlan& plan, uint64_t seed, int threads, uint8_t* data);

// Bytes per storage class ("fp8", "fp4", "scales", "bf16", "f32"), for the summary line.
std::map<std::string, uint64_t> BytesByClass(const CheckpointPlan& plan);

struct BenchModelOptions {
  std::string preset = "flash4";
  BenchScale scale = BenchScale::kReal;
  uint64_t seed = 0;
  int threads = 0;             // <= 0: all cores
  std::string tokenizer_json;  // empty: tokenizer::DefaultTokenizerPath("deepseek-v4.1")
};

struct BenchModelSummary {
  std::map<std::string, uint64_t> bytes_by_class;
  uint64_t total_bytes = 0;  // model.safetensors size
  int num_tensors = 0;
  double seconds = 0.0;          // whole generation
  double write_seconds = 0.0;    // model.safetensors alone (map, fill, unmap, rename)
  std::string ToString() const;  // one line
};

// Writes config.json, generation_config.json, model.safetensors (+ .index.json),
// tokenizer.json (+ tokenizer_config.json) into `dir` (created; must not exist or be empty).
// The safetensors file is mmapped and filled in place (never held in memory twice), written
// under a temporary name and renamed. Errors name the file.
base::StatusOr<BenchModelSummary> WriteBenchModel(const std::filesystem::path& dir,
                                                  const BenchModelOptions& options);

// Cheap checks of a written checkpoint (headers only, no data read): config.json validates,
// model.safetensors holds exactly io::ExpectedTensors (names, dtypes, shapes), and the Engram
// hash constants derive from tokenizer.json (table sizes match engram_num_embeddings).
// Returns the number of tensors checked; errors name the file / tensor.
base::StatusOr<int64_t> VerifyBenchModel(const std::filesystem::path& dir);

}  // namespace deepinfer::bench

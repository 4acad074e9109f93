// Config, layout and fill of the GPU benchmark checkpoint (bench_model_spec.h).
#include "bench/gpu/bench_model_spec.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/thread_pool.h"
#include "io/checkpoint_schema.h"
#include "model/engram_hash.h"

namespace deepinfer::bench {
namespace {

using tensor::DType;

constexpr int kLayers = 4;
const std::vector<int> kCompressRatios = {0, 2, 1, 1};
const std::vector<int> kKvSources = {1, 2};
const std::vector<int> kIndexSources = {1, 2, 3};
constexpr int kCandidateSource = 2;
const std::vector<int> kEngramLayers = {0};
constexpr int kEngramMaxNgram = 4;  // as DemoModelConfigJson writes

// Bytes a work item fills (deterministic chunking: each chunk has its own PRNG stream).
constexpr uint64_t kChunkBytes = 4ull << 20;
constexpr float kEngramStd = 0.5f;

// ---- config --------------------------------------------------------------------------------

// Rows of the Engram table per Engram layer: the sum of the layer's derived primes.
std::vector<int64_t> EngramTableRows(const model::DemoModelSize& s) {
  const int64_t n_layers = static_cast<int64_t>(kEngramLayers.size());
  const int64_t columns = (kEngramMaxNgram - 1) * s.engram_n_heads;
  const std::vector<int64_t> primes =
      model::EngramPrimes(n_layers, kEngramMaxNgram, s.engram_n_heads, s.engram_vocab_size);
  const std::vector<int64_t> offsets = model::EngramOffsets(primes, columns);
  std::vector<int64_t> rows;
  for (int64_t layer = 0; layer < n_layers; ++layer) {
    const int64_t last = (layer + 1) * columns - 1;
    rows.push_back(offsets[last] + primes[last]);
  }
  return rows;
}

// ---- value tables --------------------------------------------------------------------------

// Standard normal quantile by bisection (exact enough for 256 table entries).
double NormalQuantile(double p) {
  double lo = -10.0, hi = 10.0;
  for (int i = 0; i < 100; ++i) {
    const double mid = 0.5 * (lo + hi);
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

struct Tables {
  std::array<float, 256> normal;  // N(0,1) quantiles at (i + 0.5) / 256
  std::array<uint8_t, 256> fp8;   // e4m3 codes of normal * 16 (never 0x7F / 0xFF)
  std::array<uint8_t, 256> fp4;   // e2m1 codes (low nibble) of normal * 2
  double fp8_std = 0.0;           // std of the decoded code values
  double fp4_std = 0.0;
};

const Tables& GetTables() {
  static const Tables tables = [] {
    Tables t;
    double fp8_sq = 0.0, fp4_sq = 0.0;
    for (int i = 0; i < 256; ++i) {
      t.normal[i] = static_cast<float>(NormalQuantile((i + 0.5) / 256.0));
      t.fp8[i] = tensor::F32ToE4M3Saturating(t.normal[i] * 16.0f);
      t.fp4[i] = tensor::F32ToE2M1(t.normal[i] * 2.0f);
      CHECK((t.fp8[i] & 0x7F) != 0x7F) << "NaN e4m3 code in the table";
      fp8_sq += std::pow(tensor::E4M3ToF32(t.fp8[i]), 2);
      fp4_sq += std::pow(tensor::E2M1ToF32(t.fp4[i]), 2);
    }
    t.fp8_std = std::sqrt(fp8_sq / 256.0);
    t.fp4_std = std::sqrt(fp4_sq / 256.0);
    return t;
  }();
  return tables;
}

// E8M0 byte of the power of two closest to target_std / code_std.
uint8_t ScaleByteFor(double target_std, double code_std) {
  const long exponent = std::lround(std::log2(target_std / code_std));
  return static_cast<uint8_t>(std::clamp<long>(127 + exponent, 1, 254));
}

// ---- plan ----------------------------------------------------------------------------------

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

// (center, std) of a BF16 / F32 tensor.
std::pair<float, float> PlainDistribution(std::string_view name,
                                          const std::vector<int64_t>& shape) {
  if (EndsWith(name, "norm.weight")) return {1.0f, 0.05f};
  if (EndsWith(name, "engram.q_weight") || EndsWith(name, "engram.k_weight")) return {1.0f, 0.3f};
  if (EndsWith(name, "attn_sink")) return {0.0f, 0.1f};
  if (EndsWith(name, "gate.bias") || EndsWith(name, "gate.bias_vl")) return {0.0f, 0.05f};
  if (name.find(".hc_") != std::string_view::npos) {
    if (EndsWith(name, "_fn")) return {0.0f, 0.01f};
    if (EndsWith(name, "_base")) return {0.0f, 0.3f};
    if (EndsWith(name, "_scale")) return {0.5f, 0.15f};
  }
  if (name == "embed.weight") return {0.0f, 1.0f};
  if (shape.size() == 2) return {0.0f, 1.0f / std::sqrt(static_cast<float>(shape[1]))};
  return {0.0f, 0.1f};
}

// The effective std of a quantised weight: 1/sqrt(K), Engram rows kEngramStd.
double QuantizedTargetStd(const io::ExpectedTensor& weight) {
  if (EndsWith(weight.name, "engram.embed.weight")) return kEngramStd;
  int64_t k = weight.shape.back();
  if (weight.encoding == io::TensorEncoding::kPackedFp4) k *= 2;
  return 1.0 / std::sqrt(static_cast<double>(k));
}

PlannedTensor PlanOne(const io::ExpectedTensor& t,
                      const std::map<std::string, const io::ExpectedTensor*>& by_name) {
  PlannedTensor p;
  p.name = t.name;
  p.dtype = t.dtype;
  p.shape = t.shape;
  const int64_t elements = NumElements(t.shape);
  p.bytes = static_cast<uint64_t>(elements) * std::max(1, tensor::DTypeBits(t.dtype) / 8);
  const Tables& tables = GetTables();
  if (t.encoding == io::TensorEncoding::kBlockScales) {
    const std::string weight_name = t.name.substr(0, t.name.size() - 6) + ".weight";
    const auto it = by_name.find(weight_name);
    CHECK(it != by_name.end()) << t.name << ": no weight " << weight_name;
    const io::ExpectedTensor& w = *it->second;
    const bool fp4 = w.encoding == io::TensorEncoding::kPackedFp4;
    p.fill = FillKind::kConstByte;
    p.const_byte = ScaleByteFor(QuantizedTargetStd(w), fp4 ? tables.fp4_std : tables.fp8_std);
  } else if (t.encoding == io::TensorEncoding::kPackedFp4) {
    p.fill = FillKind::kFp4Codes;
  } else if (t.dtype == DType::kF8E4M3) {
    p.fill = FillKind::kFp8Codes;
  } else {
    CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF32)
        << t.name << ": unexpected dtype " << tensor::DTypeName(t.dtype);
    p.fill = t.dtype == DType::kBF16 ? FillKind::kBf16Normal : FillKind::kF32Normal;
    std::tie(p.center, p.stddev) = PlainDistribution(t.name, t.shape);
  }
  return p;
}

std::string HeaderJson(const std::vector<PlannedTensor>& tensors) {
  nlohmann::ordered_json header;
  header["__metadata__"] = {{"format", "pt"}};
  for (const PlannedTensor& t : tensors) {
    header[t.name] = {{"dtype", tensor::SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {t.offset, t.offset + t.bytes}}};
  }
  std::string text = header.dump();
  text.append((8 - (8 + text.size()) % 8) % 8, ' ');
  return text;
}

// ---- fill ----------------------------------------------------------------------------------

uint64_t Fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return h;
}

// splitmix64: one independent stream per (seed, tensor, chunk).
class ChunkRng {
 public:
  ChunkRng(uint64_t seed, uint64_t name_hash, uint64_t chunk)
      : state_(seed * 0x9E3779B97F4A7C15ULL ^ name_hash ^ (chunk + 1) * 0xD1B54A32D192ED03ULL) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t state_;
};

// Fills out[0, n) with one table byte per random byte.
void FillBytesFromTable(ChunkRng& rng, const std::array<uint8_t, 256>& table, uint8_t* out,
                        uint64_t n) {
  uint64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t r = rng.Next();
    for (int j = 0; j < 8; ++j) out[i + j] = table[(r >> (8 * j)) & 0xFF];
  }
  const uint64_t r = rng.Next();
  for (int j = 0; i < n; ++i, ++j) out[i] = table[(r >> (8 * j)) & 0xFF];
}

void FillPackedFp4(ChunkRng& rng, const std::array<uint8_t, 256>& table, uint8_t* out, uint64_t n) {
  for (uint64_t i = 0; i < n; i += 4) {
    const uint64_t r = rng.Next();
    for (uint64_t j = 0; j < 4 && i + j < n; ++j) {
      const uint8_t lo = table[(r >> (16 * j)) & 0xFF];
      const uint8_t hi = table[(r >> (16 * j + 8)) & 0xFF];
      out[i + j] = tensor::PackE2M1Pair(lo, hi);
    }
  }
}

// Elements [0, n) as center + std * N(0,1) table values, stored as BF16 or F32.
void FillNormal(ChunkRng& rng, const PlannedTensor& t, uint8_t* out, uint64_t n) {
  const std::array<float, 256>& normal = GetTables().normal;
  uint64_t r = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (i % 8 == 0) r = rng.Next();
    const float v = t.center + t.stddev * normal[(r >> (8 * (i % 8))) & 0xFF];
    if (t.fill == FillKind::kBf16Normal) {
      const uint16_t bits = tensor::F32ToBF16(v);
      std::memcpy(out + 2 * i, &bits, 2);
    } else {
      std::memcpy(out + 4 * i, &v, 4);
    }
  }
}

void FillChunk(const PlannedTensor& t, uint64_t seed, uint64_t chunk, uint8_t* data) {
  const uint64_t begin = chunk * kChunkBytes;
  const uint64_t n = std::min(t.bytes, begin + kChunkBytes) - begin;
  uint8_t* out = data + t.offset + begin;
  ChunkRng rng(seed, Fnv1a64(t.name), chunk);
  const Tables& tables = GetTables();
  switch (t.fill) {
    case FillKind::kConstByte:
      std::memset(out, t.const_byte, n);
      break;
    case FillKind::kFp8Codes:
      FillBytesFromTable(rng, tables.fp8, out, n);
      break;
    case FillKind::kFp4Codes:
      FillPackedFp4(rng, tables.fp4, out, n);
      break;
    case FillKind::kBf16Normal:
      FillNormal(rng, t, out, n / 2);
      break;
    case FillKind::kF32Normal:
      FillNormal(rng, t, out, n / 4);
      break;
  }
}

}  // namespace

base::StatusOr<BenchScale> ParseBenchScale(std::string_view text) {
  if (text == "real") return BenchScale::kReal;
  if (text == "tiny") return BenchScale::kTiny;
  return base::InvalidArgumentError("--scale: unknown scale '" + std::string(text) +
                                    "' (real | tiny)");
}

base::Status CheckBenchPreset(std::string_view preset) {
  if (preset == "flash4") return base::Status::Ok();
  return base::InvalidArgumentError("--layers-preset: unknown preset '" + std::string(preset) +
                                    "' (flash4)");
}

model::DemoModelSize BenchModelSize(BenchScale scale) {
  model::DemoModelSize s = model::DemoModelSize::Demo();
  if (scale == BenchScale::kTiny) return s;
  s.hidden_size = 5120;
  s.num_attention_heads = 64;
  s.head_dim = 512;
  s.qk_rope_head_dim = 64;
  s.q_lora_rank = 1280;
  s.o_groups = 8;
  s.o_lora_rank = 1024;
  s.n_routed_experts = 384;
  s.num_experts_per_tok = 6;
  s.moe_intermediate_size = 2304;
  s.sliding_window = 128;
  s.index_n_heads = 32;
  s.index_head_dim = 128;
  s.index_topk = 512;
  s.candidate_topk_blocks = 2048;
  s.candidate_block_size = 8;
  s.engram_n_heads = 8;
  s.engram_head_dim = 256;
  s.engram_vocab_size = 100000;
  return s;
}

nlohmann::ordered_json BenchModelConfigJson(BenchScale scale, int64_t compressed_vocab_size) {
  const model::DemoModelSize size = BenchModelSize(scale);
  nlohmann::ordered_json c = model::DemoModelConfigJson(size, compressed_vocab_size);
  nlohmann::ordered_json& t = c["text_config"];
  t["num_hidden_layers"] = kLayers;
  t["compress_ratios"] = kCompressRatios;
  t["kv_source_layer_ids"] = kKvSources;
  t["index_source_layer_ids"] = kIndexSources;
  t["candidate_source_layer_id"] = kCandidateSource;
  t["engram_layer_ids"] = kEngramLayers;
  t["engram_max_ngram_size"] = kEngramMaxNgram;
  t["engram_num_embeddings"] = EngramTableRows(size);
  return c;
}

CheckpointPlan PlanCheckpoint(const io::ModelConfig& config) {
  CHECK(config.quantization_config.present) << "the bench checkpoint is quantised";
  const std::vector<io::ExpectedTensor> expected = io::ExpectedTensors(config);
  std::map<std::string, const io::ExpectedTensor*> by_name;
  for (const auto& t : expected) by_name[t.name] = &t;
  CheckpointPlan plan;
  for (const auto& t : expected) plan.tensors.push_back(PlanOne(t, by_name));
  // Larger elements first (like the release files), so every tensor is naturally aligned.
  std::stable_sort(plan.tensors.begin(), plan.tensors.end(),
                   [](const PlannedTensor& a, const PlannedTensor& b) {
                     return tensor::DTypeBits(a.dtype) > tensor::DTypeBits(b.dtype);
                   });
  uint64_t cursor = 0;
  for (PlannedTensor& t : plan.tensors) {
    const uint64_t align = std::max(1, tensor::DTypeBits(t.dtype) / 8);
    cursor = (cursor + align - 1) / align * align;
    t.offset = cursor;
    cursor += t.bytes;
  }
  plan.data_bytes = cursor;
  plan.header = HeaderJson(plan.tensors);
  return plan;
}

void FillCheckpoint(const CheckpointPlan& plan, uint64_t seed, int threads, uint8_t* data) {
  struct WorkItem {
    const PlannedTensor* tensor;
    uint64_t chunk;
  };
  std::vector<WorkItem> items;
  for (const PlannedTensor& t : plan.tensors) {
    for (uint64_t c = 0; c * kChunkBytes < t.bytes; ++c) items.push_back({&t, c});
  }
  // Items go to whichever thread is free (sizes differ); the output does not depend on it.
  std::atomic<size_t> next{0};
  const auto worker = [&](int64_t, int64_t) {
    for (size_t i = next++; i < items.size(); i = next++) {
      FillChunk(*items[i].tensor, seed, items[i].chunk, data);
    }
  };
  const int n = threads > 0 ? threads : static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 1) return worker(0, 1);
  base::ThreadPool pool(n - 1);
  pool.ParallelFor(n, 1, worker);
}

std::map<std::string, uint64_t> BytesByClass(const CheckpointPlan& plan) {
  std::map<std::string, uint64_t> bytes;
  for (const PlannedTensor& t : plan.tensors) {
    switch (t.fill) {
      case FillKind::kConstByte:
        bytes["scales"] += t.bytes;
        break;
      case FillKind::kFp8Codes:
        bytes["fp8"] += t.bytes;
        break;
      case FillKind::kFp4Codes:
        bytes["fp4"] += t.bytes;
        break;
      case FillKind::kBf16Normal:
        bytes["bf16"] += t.bytes;
        break;
      case FillKind::kF32Normal:
        bytes["f32"] += t.bytes;
        break;
    }
  }
  return bytes;
}

}  // namespace deepinfer::bench

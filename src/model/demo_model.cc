// Weights of the demo model: every tensor of io::ExpectedTensors(config), random and stored
// like the release (FP8 e4m3 + E8M0 32x32 block scales, MXFP4 experts, FP8 Engram rows with
// per-32 scales, BF16, F32).
#include "model/demo_model.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <string_view>
#include <system_error>

#include "base/check.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"
#include "io/safetensors_writer.h"
#include "model/engram_hash_token_map.h"
#include "tensor/dtype.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::model {
namespace {

namespace fs = std::filesystem;
using tensor::DType;

constexpr int64_t kScaleBlock = 32;  // FP4 per-row blocks and Engram per-row blocks
constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;

uint64_t Fnv1a64(std::string_view text) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : text) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return h;
}

// splitmix64, seeded per tensor from (seed, name): tensors are independent of each other
// and of the order they are generated in.
class TensorRng {
 public:
  TensorRng(uint64_t seed, std::string_view name)
      : state_(seed * 0x9E3779B97F4A7C15ULL ^ Fnv1a64(name)) {}
  uint64_t Next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }
  // Uniform in [center - half_width, center + half_width).
  float Uniform(float center, float half_width) {
    const float unit = static_cast<float>(Next() >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    return center + (2.0f * unit - 1.0f) * half_width;
  }

 private:
  uint64_t state_;
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// (center, half width) of the uniform distribution of one tensor. Matrices get standard
// deviation 1/sqrt(fan_in); norms and Engram gate weights sit around 1.
std::pair<float, float> Distribution(std::string_view name, int64_t cols) {
  if (EndsWith(name, "norm.weight")) return {1.0f, 0.1f};
  if (EndsWith(name, "engram.q_weight") || EndsWith(name, "engram.k_weight")) return {1.0f, 0.5f};
  if (EndsWith(name, "attn_sink")) return {0.0f, 1.0f};
  if (EndsWith(name, "gate.bias") || EndsWith(name, "gate.bias_vl")) return {0.0f, 0.1f};
  if (EndsWith(name, "_base")) return {0.0f, 0.5f};
  if (EndsWith(name, "_scale") && name.find("hc_") != std::string_view::npos) return {0.5f, 0.25f};
  if (name == "embed.weight" || EndsWith(name, "engram.embed.weight")) return {0.0f, 1.0f};
  return {0.0f, std::sqrt(3.0f / static_cast<float>(std::max<int64_t>(cols, 1)))};
}

int64_t NumElements(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t d : shape) n *= d;
  return n;
}

std::vector<float> RandomValues(uint64_t seed, const std::string& name, int64_t rows,
                                int64_t cols) {
  TensorRng rng(seed, name);
  const auto [center, half_width] = Distribution(name, cols);
  std::vector<float> values(static_cast<size_t>(rows * cols));
  for (float& v : values) v = rng.Uniform(center, half_width);
  return values;
}

// E8M0 byte of 2^ceil(log2(amax / format_max)) (127 = 1.0 for an all-zero block).
uint8_t ScaleByte(float amax, float format_max) {
  return tensor::E8M0CeilFromF32(amax / format_max).value_or(127);
}

struct Quantized {
  std::vector<uint8_t> values;
  std::vector<uint8_t> scales;
};

// e4m3 values with one E8M0 scale per [block_rows x block_cols] block.
Quantized QuantizeFp8(const std::vector<float>& w, int64_t rows, int64_t cols, int64_t block_rows,
                      int64_t block_cols) {
  const int64_t grid_rows = (rows + block_rows - 1) / block_rows;
  const int64_t grid_cols = (cols + block_cols - 1) / block_cols;
  Quantized q{std::vector<uint8_t>(w.size()),
              std::vector<uint8_t>(static_cast<size_t>(grid_rows * grid_cols))};
  for (int64_t br = 0; br < grid_rows; ++br) {
    for (int64_t bc = 0; bc < grid_cols; ++bc) {
      const int64_t r_end = std::min(rows, (br + 1) * block_rows);
      const int64_t c_end = std::min(cols, (bc + 1) * block_cols);
      float amax = 0.0f;
      for (int64_t r = br * block_rows; r < r_end; ++r) {
        for (int64_t c = bc * block_cols; c < c_end; ++c)
          amax = std::max(amax, std::fabs(w[r * cols + c]));
      }
      const uint8_t scale = ScaleByte(amax, kE4M3Max);
      q.scales[br * grid_cols + bc] = scale;
      const float inv = 1.0f / tensor::E8M0ToF32(scale);
      for (int64_t r = br * block_rows; r < r_end; ++r) {
        for (int64_t c = bc * block_cols; c < c_end; ++c) {
          q.values[r * cols + c] = tensor::F32ToE4M3Saturating(w[r * cols + c] * inv);
        }
      }
    }
  }
  return q;
}

// Packed e2m1 [rows, cols/2] with one E8M0 scale per 32 values of a row.
Quantized QuantizeFp4(const std::vector<float>& w, int64_t rows, int64_t cols) {
  const int64_t blocks = (cols + kScaleBlock - 1) / kScaleBlock;
  Quantized q{std::vector<uint8_t>(static_cast<size_t>(rows * cols / 2)),
              std::vector<uint8_t>(static_cast<size_t>(rows * blocks))};
  std::vector<uint8_t> codes(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = w.data() + r * cols;
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t end = std::min(cols, (b + 1) * kScaleBlock);
      float amax = 0.0f;
      for (int64_t c = b * kScaleBlock; c < end; ++c) amax = std::max(amax, std::fabs(row[c]));
      const uint8_t scale = ScaleByte(amax, kE2M1Max);
      q.scales[r * blocks + b] = scale;
      const float inv = 1.0f / tensor::E8M0ToF32(scale);
      for (int64_t c = b * kScaleBlock; c < end; ++c) codes[c] = tensor::F32ToE2M1(row[c] * inv);
    }
    for (int64_t j = 0; j < cols / 2; ++j) {
      q.values[r * (cols / 2) + j] = tensor::PackE2M1Pair(codes[2 * j], codes[2 * j + 1]);
    }
  }
  return q;
}

template <typename T>
std::span<const uint8_t> AsBytes(const std::vector<T>& v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size() * sizeof(T)};
}

struct Generated {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

// Generates one weight (and its scale when `scale` is set) into `out`.
void GenerateTensor(uint64_t seed, const io::ModelConfig& config, const io::ExpectedTensor& t,
                    const io::ExpectedTensor* scale, std::vector<Generated>* out) {
  const int64_t rows = t.shape.empty() ? 1 : t.shape[0];
  const int64_t stored_cols = t.shape.size() < 2 ? NumElements(t.shape) / rows : t.shape[1];
  if (scale == nullptr) {
    const std::vector<float> w = RandomValues(seed, t.name, rows, stored_cols);
    std::vector<uint8_t> bytes;
    if (t.dtype == DType::kBF16) {
      std::vector<uint16_t> bf16(w.size());
      for (size_t i = 0; i < w.size(); ++i) bf16[i] = tensor::F32ToBF16(w[i]);
      const auto b = AsBytes(bf16);
      bytes.assign(b.begin(), b.end());
    } else {
      CHECK(t.dtype == DType::kF32)
          << t.name << ": unexpected dtype " << tensor::DTypeName(t.dtype);
      const auto b = AsBytes(w);
      bytes.assign(b.begin(), b.end());
    }
    out->push_back({t.name, t.dtype, t.shape, std::move(bytes)});
    return;
  }
  Quantized q;
  if (t.encoding == io::TensorEncoding::kPackedFp4) {
    const int64_t cols = stored_cols * 2;
    q = QuantizeFp4(RandomValues(seed, t.name, rows, cols), rows, cols);
  } else if (io::ClassifyTensorName(t.name) == io::ModelPart::kEngram &&
             EndsWith(t.name, "engram.embed.weight")) {
    q = QuantizeFp8(RandomValues(seed, t.name, rows, stored_cols), rows, stored_cols, 1,
                    kScaleBlock);
  } else {
    const auto& qc = config.quantization_config;
    q = QuantizeFp8(RandomValues(seed, t.name, rows, stored_cols), rows, stored_cols,
                    qc.weight_block_n, qc.weight_block_k);
  }
  CHECK_EQ(static_cast<int64_t>(q.scales.size()), NumElements(scale->shape)) << scale->name;
  out->push_back({t.name, t.dtype, t.shape, std::move(q.values)});
  out->push_back({scale->name, scale->dtype, scale->shape, std::move(q.scales)});
}

base::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out || !(out << text) || !out.flush()) {
    return base::UnavailableError("cannot write " + path.string());
  }
  return base::Status::Ok();
}

// Copies `from` to `to` and makes the copy writable by its owner (the source may be
// read-only).
base::Status CopyFile(const fs::path& from, const fs::path& to) {
  std::error_code ec;
  fs::copy_file(from, to, ec);
  if (!ec) {
    fs::permissions(to,
                    fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read |
                        fs::perms::others_read,
                    ec);
  }
  if (ec) return base::UnavailableError("cannot copy " + from.string() + ": " + ec.message());
  return base::Status::Ok();
}

base::Status CopyTokenizer(const fs::path& tokenizer_json, const fs::path& dir) {
  DI_RETURN_IF_ERROR(CopyFile(tokenizer_json, dir / "tokenizer.json"));
  const fs::path config = tokenizer_json.parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (fs::exists(config, ec)) DI_RETURN_IF_ERROR(CopyFile(config, dir / "tokenizer_config.json"));
  return base::Status::Ok();
}

base::Status WriteWeights(const fs::path& dir, const io::ModelConfig& config, uint64_t seed) {
  const std::vector<io::ExpectedTensor> expected = io::ExpectedTensors(config);
  std::map<std::string, const io::ExpectedTensor*> by_name;
  for (const auto& t : expected) by_name[t.name] = &t;
  std::vector<Generated> tensors;
  for (const auto& t : expected) {
    if (t.encoding == io::TensorEncoding::kBlockScales) continue;  // made with its weight
    const io::ExpectedTensor* scale = nullptr;
    if (EndsWith(t.name, ".weight")) {
      const auto it = by_name.find(t.name.substr(0, t.name.size() - 7) + ".scale");
      if (it != by_name.end()) scale = it->second;
    }
    GenerateTensor(seed, config, t, scale, &tensors);
  }
  // Like the release files: larger elements first, so every tensor is naturally aligned.
  std::stable_sort(tensors.begin(), tensors.end(), [](const Generated& a, const Generated& b) {
    return tensor::DTypeBits(a.dtype) > tensor::DTypeBits(b.dtype);
  });
  io::SafetensorsWriter writer;
  writer.SetMetadata({{"format", "pt"}});
  std::map<std::string, std::string> weight_map;
  for (auto& t : tensors) {
    DI_RETURN_IF_ERROR(writer.Add(t.name, t.dtype, t.shape, t.bytes));
    weight_map[t.name] = "model.safetensors";
    t.bytes = {};
  }
  DI_RETURN_IF_ERROR(writer.WriteFile(dir / "model.safetensors"));
  return io::WriteSafetensorsIndex(dir, writer.data_bytes(), weight_map);
}

}  // namespace

base::StatusOr<io::ModelConfig> StartGeneratedCheckpoint(
    const fs::path& dir, std::string tokenizer_json, std::string_view label,
    const std::function<nlohmann::ordered_json(int64_t)>& make_config) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return base::AlreadyExistsError(dir.string() + " exists and is not empty");
  }
  fs::create_directories(dir, ec);
  if (ec) return base::UnavailableError("cannot create " + dir.string() + ": " + ec.message());
  if (tokenizer_json.empty()) tokenizer_json = tokenizer::DefaultTokenizerPath("deepseek-v4.1");
  DI_ASSIGN_OR_RETURN(const std::vector<EngramVocabEntry> vocab, LoadEngramVocab(tokenizer_json));
  if (static_cast<int64_t>(vocab.size()) != kDemoVocabSize) {
    return base::InvalidArgumentError(
        tokenizer_json + ": has " + std::to_string(vocab.size()) + " tokens, the " +
        std::string(label) + " needs the V4.1 tokenizer (" + std::to_string(kDemoVocabSize) + ")");
  }
  const int64_t compressed_vocab = BuildCompressedTokenMap(vocab).compressed_vocab_size;
  const std::string config_text = make_config(compressed_vocab).dump(2) + "\n";
  DI_ASSIGN_OR_RETURN(io::ModelConfig config,
                      io::ParseModelConfig(config_text, std::string(label) + " config.json"));
  DI_RETURN_IF_ERROR(WriteText(dir / "config.json", config_text));
  DI_RETURN_IF_ERROR(WriteText(dir / "generation_config.json",
                               "{\n  \"bos_token_id\": 0,\n  \"eos_token_id\": 1\n}\n"));
  DI_RETURN_IF_ERROR(CopyTokenizer(tokenizer_json, dir));
  return config;
}

base::Status WriteDemoModel(const fs::path& dir, const DemoModelOptions& options) {
  DI_ASSIGN_OR_RETURN(const io::ModelConfig config,
                      StartGeneratedCheckpoint(
                          dir, options.tokenizer_json, "demo model", [&](int64_t compressed_vocab) {
                            return DemoModelConfigJson(options.size, compressed_vocab);
                          }));
  return WriteWeights(dir, config, options.seed);
}

}  // namespace deepinfer::model

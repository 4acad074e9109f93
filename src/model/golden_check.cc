#include "model/golden_check.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "fmt/format.h"
#include "io/safetensors.h"
#include "model/model.h"

namespace deepinfer::model {
namespace {

using base::Status;
using base::StatusOr;

template <typename T>
StatusOr<std::vector<T>> ReadVector(const io::SafetensorsFile& f, const std::string& name) {
  DI_ASSIGN_OR_RETURN(const io::SafetensorsTensorInfo* info, f.Info(name));
  if (info->dtype != tensor::DTypeOf<T>::value) {
    return base::InvalidArgumentError(f.path().string() + ": tensor '" + name + "' has dtype " +
                                      std::string(tensor::DTypeName(info->dtype)));
  }
  std::span<const uint8_t> bytes = f.Bytes(*info);
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), out.size() * sizeof(T));
  return out;
}

GoldenCheck FromComparison(const LogitsComparison& c) {
  GoldenCheck g;
  g.name = c.name;
  g.passed = c.passed;
  g.max_abs = c.max_abs;
  g.max_rel = c.max_rel;
  g.summary = fmt::format("max_abs {:.3g} max_rel {:.3g} median_row {:.3g} rows<=1e-3 {:.0f}%{}",
                          c.max_abs, c.max_rel, c.median_row, 100.0 * c.frac_rows_1e3,
                          c.passed ? "" : " (" + c.detail + ")");
  return g;
}

struct Prompt {
  std::vector<int32_t> ids;
  int64_t incremental_prefix_len = 0;
  std::vector<int64_t> chunk_sizes;
};

// Feeds `ids` to a fresh sequence in chunks of the given sizes (the last chunk takes the
// rest); returns all logits rows.
StatusOr<std::vector<float>> RunChunks(Model& model, SequenceState& state,
                                       std::span<const int32_t> ids,
                                       const std::vector<int64_t>& sizes) {
  std::vector<float> logits;
  size_t at = 0, k = 0;
  while (at < ids.size()) {
    int64_t n = k < sizes.size() ? sizes[k++] : static_cast<int64_t>(ids.size() - at);
    n = std::clamp<int64_t>(n, 1, static_cast<int64_t>(ids.size() - at));
    ForwardBatch batch;
    batch.chunks.push_back({&state, ids.subspan(at, n), state.length, true});
    DI_ASSIGN_OR_RETURN(ForwardOutput out, model.Forward(batch));
    logits.insert(logits.end(), out.logits.begin(), out.logits.end());
    at += n;
  }
  return logits;
}

Status CheckPrompt(Model& model, const io::SafetensorsFile& goldens, int p, const Prompt& prompt,
                   const EngramHashConstants* engram, GoldenCaseResult* result) {
  const int64_t V = model.config().text().vocab_size;
  const int64_t S = static_cast<int64_t>(prompt.ids.size());
  const std::string pre = "prompt." + std::to_string(p) + ".";
  auto compare = [&](const std::string& name, const std::vector<float>& engine) -> Status {
    DI_ASSIGN_OR_RETURN(std::vector<float> golden, ReadVector<float>(goldens, pre + name));
    if (golden.size() != engine.size()) {
      return base::InternalError(pre + name + ": engine produced " + std::to_string(engine.size()) +
                                 " values, golden has " + std::to_string(golden.size()));
    }
    result->checks.push_back(FromComparison(CompareLogits(
        pre + name, engine.data(), golden.data(), static_cast<int64_t>(golden.size()) / V, V)));
    return Status::Ok();
  };
  // (a) one-shot prefill; also the start of (c).
  SequenceState state = model.NewSequence();
  DI_ASSIGN_OR_RETURN(std::vector<float> prefill, RunChunks(model, state, prompt.ids, {S}));
  DI_RETURN_IF_ERROR(compare("prefill_logits", prefill));
  // (c) greedy continuation with the cache.
  DI_ASSIGN_OR_RETURN(std::vector<int32_t> golden_tokens,
                      ReadVector<int32_t>(goldens, pre + "greedy_tokens"));
  std::vector<float> greedy(prefill.end() - V, prefill.end());
  std::vector<int32_t> tokens;
  for (size_t i = 0; i < golden_tokens.size(); ++i) {
    const float* row = greedy.data() + i * V;
    tokens.push_back(static_cast<int32_t>(std::max_element(row, row + V) - row));
    if (i + 1 == golden_tokens.size()) break;
    DI_ASSIGN_OR_RETURN(std::vector<float> next,
                        RunChunks(model, state, std::span(&golden_tokens[i], 1), {1}));
    greedy.insert(greedy.end(), next.begin(), next.end());
  }
  DI_RETURN_IF_ERROR(compare("greedy_logits", greedy));
  GoldenCheck tok{pre + "greedy_tokens", tokens == golden_tokens, ""};
  int first_diff = -1;
  for (size_t i = 0; i < tokens.size() && first_diff < 0; ++i) {
    if (tokens[i] != golden_tokens[i]) first_diff = static_cast<int>(i);
  }
  tok.summary = tok.passed ? fmt::format("{} tokens identical", tokens.size())
                           : fmt::format("first difference at step {}", first_diff);
  result->checks.push_back(tok);
  // (b) incremental: prefix, then one token per forward.
  {
    SequenceState s = model.NewSequence();
    std::vector<int64_t> sizes = {prompt.incremental_prefix_len};
    sizes.resize(S - prompt.incremental_prefix_len + 1, 1);
    DI_ASSIGN_OR_RETURN(std::vector<float> inc, RunChunks(model, s, prompt.ids, sizes));
    DI_RETURN_IF_ERROR(compare("incremental_logits", inc));
  }
  // (b2) chunked prefill.
  {
    SequenceState s = model.NewSequence();
    DI_ASSIGN_OR_RETURN(std::vector<float> chunked,
                        RunChunks(model, s, prompt.ids, prompt.chunk_sizes));
    DI_RETURN_IF_ERROR(compare("chunked_logits", chunked));
  }
  // Engram hash ids.
  if (engram != nullptr) {
    DI_ASSIGN_OR_RETURN(std::vector<int64_t> golden_ids,
                        ReadVector<int64_t>(goldens, pre + "engram_hash_ids"));
    std::vector<int64_t> ids;
    ComputeEngramRowIds(*engram, {}, prompt.ids, &ids);
    int64_t mismatches = 0;
    for (size_t i = 0; i < std::min(ids.size(), golden_ids.size()); ++i) {
      mismatches += ids[i] != golden_ids[i];
    }
    const bool ok = ids.size() == golden_ids.size() && mismatches == 0;
    result->checks.push_back(
        {pre + "engram_hash_ids", ok,
         ok ? fmt::format("{} ids exact", ids.size())
            : fmt::format("{} of {} ids differ", mismatches, golden_ids.size())});
  }
  return Status::Ok();
}

}  // namespace

LogitsComparison CompareLogits(const std::string& name, const float* engine, const float* golden,
                               int64_t rows, int64_t cols) {
  LogitsComparison c;
  c.name = name;
  c.rows = rows;
  std::vector<double> row_max(rows, 0.0);
  double golden_max = 0.0;
  bool finite = true;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < cols; ++j) {
      const double e = engine[r * cols + j], g = golden[r * cols + j];
      if (!std::isfinite(e)) finite = false;
      row_max[r] = std::max(row_max[r], std::fabs(e - g));
      golden_max = std::max(golden_max, std::fabs(g));
    }
    c.max_abs = std::max(c.max_abs, row_max[r]);
  }
  c.max_rel = golden_max > 0 ? c.max_abs / golden_max : c.max_abs;
  std::vector<double> sorted = row_max;
  std::sort(sorted.begin(), sorted.end());
  c.median_row = rows == 0  ? 0.0
                 : rows % 2 ? sorted[rows / 2]
                            : 0.5 * (sorted[rows / 2 - 1] + sorted[rows / 2]);
  const int64_t within =
      std::count_if(row_max.begin(), row_max.end(), [](double d) { return d <= 1e-3; });
  c.frac_rows_1e3 = rows ? static_cast<double>(within) / rows : 1.0;
  std::vector<std::string> why;
  if (!finite) why.push_back("non-finite logits");
  if (c.median_row > 1e-4) why.push_back("median row diff > 1e-4");
  if (c.frac_rows_1e3 < 0.9) why.push_back("fewer than 90% of rows within 1e-3");
  if (c.max_abs > 5e-2) why.push_back("a row differs by > 5e-2");
  c.passed = why.empty();
  for (const std::string& w : why) c.detail += (c.detail.empty() ? "" : "; ") + w;
  return c;
}

bool GoldenCaseResult::passed() const {
  return !checks.empty() &&
         std::all_of(checks.begin(), checks.end(), [](const GoldenCheck& c) { return c.passed; });
}

StatusOr<EngramHashConstants> LoadGoldenEngramConstants(const std::filesystem::path& file) {
  DI_ASSIGN_OR_RETURN(std::unique_ptr<io::SafetensorsFile> f, io::SafetensorsFile::Open(file));
  EngramHashConstants c;
  DI_ASSIGN_OR_RETURN(c.token_map, ReadVector<int32_t>(*f, "token_map"));
  DI_ASSIGN_OR_RETURN(std::vector<int64_t> pad, ReadVector<int64_t>(*f, "pad_id"));
  if (pad.size() != 1) return base::InvalidArgumentError(file.string() + ": pad_id must be [1]");
  c.pad_id = pad[0];
  DI_ASSIGN_OR_RETURN(c.multipliers, ReadVector<int64_t>(*f, "multipliers"));
  DI_ASSIGN_OR_RETURN(c.primes, ReadVector<int64_t>(*f, "primes"));
  DI_ASSIGN_OR_RETURN(c.offsets, ReadVector<int64_t>(*f, "offsets"));
  const io::SafetensorsTensorInfo* m = f->Find("multipliers");
  const io::SafetensorsTensorInfo* pr = f->Find("primes");
  if (m->shape.rank() != 2 || pr->shape.rank() != 2 || m->shape[0] != pr->shape[0]) {
    return base::InvalidArgumentError(file.string() + ": multipliers/primes must be 2-D");
  }
  c.n_layers = static_cast<int>(m->shape[0]);
  c.max_ngram = static_cast<int>(m->shape[1]);
  if (c.max_ngram < 2) return base::InvalidArgumentError(file.string() + ": max_ngram < 2");
  c.n_heads = static_cast<int>(pr->shape[1] / (c.max_ngram - 1));
  return c;
}

StatusOr<GoldenCaseResult> RunGoldenCase(const std::filesystem::path& dir, Backend* backend) {
  GoldenCaseResult result;
  result.case_name = dir.filename().string();
  std::optional<EngramHashConstants> engram;
  if (std::filesystem::exists(dir / "engram_hash.safetensors")) {
    DI_ASSIGN_OR_RETURN(engram, LoadGoldenEngramConstants(dir / "engram_hash.safetensors"));
  }
  DI_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, Model::Load(dir, backend, engram));
  DI_ASSIGN_OR_RETURN(std::unique_ptr<io::SafetensorsFile> goldens,
                      io::SafetensorsFile::Open(dir / "goldens.safetensors"));
  std::ifstream manifest_file(dir / "manifest.json");
  if (!manifest_file) return base::NotFoundError((dir / "manifest.json").string() + ": missing");
  std::stringstream text;
  text << manifest_file.rdbuf();
  const nlohmann::json manifest = nlohmann::json::parse(text.str(), nullptr, false);
  if (manifest.is_discarded() || !manifest.contains("prompts") || !manifest["prompts"].is_array()) {
    return base::InvalidArgumentError((dir / "manifest.json").string() + ": no prompts array");
  }
  for (const nlohmann::json& jp : manifest["prompts"]) {
    Prompt prompt;
    int p = 0;
    try {
      p = jp.at("index").get<int>();
      prompt.incremental_prefix_len = jp.at("incremental_prefix_len").get<int64_t>();
      prompt.chunk_sizes = jp.at("chunk_sizes").get<std::vector<int64_t>>();
    } catch (const nlohmann::json::exception& e) {
      return base::InvalidArgumentError((dir / "manifest.json").string() + ": " + e.what());
    }
    DI_ASSIGN_OR_RETURN(
        prompt.ids, ReadVector<int32_t>(*goldens, "prompt." + std::to_string(p) + ".input_ids"));
    if (prompt.ids.empty() || prompt.incremental_prefix_len < 1 ||
        prompt.incremental_prefix_len > static_cast<int64_t>(prompt.ids.size())) {
      return base::InvalidArgumentError("prompt " + std::to_string(p) + ": bad prefix length");
    }
    DI_RETURN_IF_ERROR(
        CheckPrompt(*model, *goldens, p, prompt, engram ? &*engram : nullptr, &result));
  }
  return result;
}

std::vector<std::filesystem::path> FindGoldenCases(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> cases;
  std::error_code ec;
  if (std::filesystem::exists(dir / "goldens.safetensors", ec)) return {dir};
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    if (entry.is_directory() && std::filesystem::exists(entry.path() / "goldens.safetensors")) {
      cases.push_back(entry.path());
    }
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

}  // namespace deepinfer::model

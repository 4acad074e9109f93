// Runs the V4.1 golden cases (shared/goldens/v41/README.md) against the model: prefill,
// incremental, chunked and greedy logits plus Engram hash ids, with the README's
// tolerances. Used by `deepinfer check-goldens` and by the tests.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "base/statusor.h"
#include "model/backend.h"
#include "model/engram.h"

namespace deepinfer::model {

// Per-row comparison of a [rows, cols] logits tensor (README "Tolerances").
struct LogitsComparison {
  std::string name;
  int64_t rows = 0;
  double max_abs = 0.0;        // max |engine - golden|
  double max_rel = 0.0;        // max_abs / max |golden|
  double median_row = 0.0;     // median over rows of the row's max |diff|
  double frac_rows_1e3 = 0.0;  // fraction of rows with max |diff| <= 1e-3
  bool passed = false;         // median <= 1e-4, >= 90% rows <= 1e-3, every row <= 5e-2
  std::string detail;          // why it failed (empty when passed)
};

LogitsComparison CompareLogits(const std::string& name, const float* engine, const float* golden,
                               int64_t rows, int64_t cols);

struct GoldenCheck {
  std::string name;  // "prompt.0.prefill_logits", "prompt.1.greedy_tokens", ...
  bool passed = false;
  std::string summary;   // one line: errors and verdict
  double max_abs = 0.0;  // logits checks: max |engine - golden| (0 for exact checks)
  double max_rel = 0.0;  // logits checks: max_abs / max |golden|
};

struct GoldenCaseResult {
  std::string case_name;
  std::vector<GoldenCheck> checks;
  bool passed() const;
};

// The Engram constants shipped with a case (engram_hash.safetensors).
base::StatusOr<EngramHashConstants> LoadGoldenEngramConstants(const std::filesystem::path& file);

// Runs every check of one case directory. Errors (unreadable files, bad model) are
// returned as Status; check failures are recorded in the result.
base::StatusOr<GoldenCaseResult> RunGoldenCase(const std::filesystem::path& dir, Backend* backend);

// The case directories under `dir`: `dir` itself if it holds goldens.safetensors, else its
// immediate subdirectories that do (sorted).
std::vector<std::filesystem::path> FindGoldenCases(const std::filesystem::path& dir);

}  // namespace deepinfer::model

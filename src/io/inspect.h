// `deepinfer inspect`: summary and validation of a model directory (library part).
#pragma once

#include <array>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>

#include "base/statusor.h"
#include "io/checkpoint_schema.h"
#include "io/model_config.h"

namespace deepinfer::io {

struct InspectReport {
  std::filesystem::path dir;
  ModelConfig config;
  size_t num_shards = 0;
  size_t num_tensors = 0;
  // Logical parameters per part (packed FP4 counts 2 per byte; E8M0 block scales excluded).
  std::array<int64_t, kNumModelParts> parameters_by_part{};
  std::map<std::string, uint64_t> bytes_by_dtype;  // dtype name -> bytes
  uint64_t total_bytes = 0;
  SchemaCheckResult check;
  bool scales_scanned = false;
  std::string scale_error;  // first E8M0 NaN found (empty = none / not scanned)
  int64_t total_parameters() const;
  bool valid() const { return check.ok() && scale_error.empty(); }
};

struct InspectOptions {
  // Read every F8_E8M0 tensor and reject NaN bytes (255). Reads all scale bytes (~6 GB of
  // Engram scales for the release checkpoint).
  bool scan_scales = true;
};

// Loads DIR/config.json and the checkpoint, counts and validates. Errors (unreadable
// config, malformed shard, ...) come back as Status; schema problems are in `check`.
base::StatusOr<InspectReport> InspectModel(const std::filesystem::path& dir,
                                           const InspectOptions& options = {});

// Human-readable report. The last line is "all N expected tensors valid" or
// "INVALID: ..." with counts; missing/extra/mismatched tensors are listed (up to
// `max_listed` each).
std::string FormatInspectReport(const InspectReport& report, int max_listed = 50);

}  // namespace deepinfer::io

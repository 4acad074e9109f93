#include "io/inspect.h"

#include <fmt/format.h>

#include "io/checkpoint.h"

namespace deepinfer::io {
namespace {

// Logical parameters of a stored tensor: packed FP4 expert weights hold 2 per byte and
// E8M0 block scales are not parameters.
int64_t StoredParameters(const SafetensorsTensorInfo& info) {
  const int64_t n = info.shape.NumElements();
  if (info.dtype == tensor::DType::kF8E8M0) return 0;
  if (info.dtype == tensor::DType::kI8 && ClassifyTensorName(info.name) == ModelPart::kExperts) {
    return 2 * n;
  }
  if (info.dtype == tensor::DType::kFP4E2M1) return n;
  return n;
}

std::string FormatCount(int64_t n) {
  if (n >= 1000000000) return fmt::format("{:.2f}B", n / 1e9);
  if (n >= 1000000) return fmt::format("{:.2f}M", n / 1e6);
  if (n >= 1000) return fmt::format("{:.1f}K", n / 1e3);
  return std::to_string(n);
}

void AppendList(std::string& out, std::string_view title, const std::vector<std::string>& names,
                int max_listed) {
  if (names.empty()) return;
  out += fmt::format("{} ({}):\n", title, names.size());
  for (size_t i = 0; i < names.size() && i < static_cast<size_t>(max_listed); ++i) {
    out += fmt::format("  {}\n", names[i]);
  }
  if (names.size() > static_cast<size_t>(max_listed)) {
    out += fmt::format("  ... and {} more\n", names.size() - max_listed);
  }
}

}  // namespace

int64_t InspectReport::total_parameters() const {
  int64_t total = 0;
  for (int64_t n : parameters_by_part) total += n;
  return total;
}

base::StatusOr<InspectReport> InspectModel(const std::filesystem::path& dir,
                                           const InspectOptions& options) {
  InspectReport report;
  report.dir = dir;
  DI_ASSIGN_OR_RETURN(report.config, LoadModelConfig(dir / "config.json"));
  DI_ASSIGN_OR_RETURN(auto checkpoint, Checkpoint::Open(dir));
  report.num_shards = checkpoint->shards().size();
  report.num_tensors = checkpoint->num_tensors();
  std::vector<ActualTensor> actual;
  actual.reserve(checkpoint->num_tensors());
  for (const auto& shard : checkpoint->shards()) {
    for (const SafetensorsTensorInfo& info : shard->tensors()) {
      report.parameters_by_part[static_cast<int>(ClassifyTensorName(info.name))] +=
          StoredParameters(info);
      report.bytes_by_dtype[std::string(tensor::DTypeName(info.dtype))] += info.size_bytes();
      report.total_bytes += info.size_bytes();
      actual.push_back({info.name, info.dtype, info.shape.ToVector()});
    }
  }
  report.check = CheckTensorsAgainstSchema(report.config, ExpectedTensors(report.config), actual);
  if (options.scan_scales) {
    report.scales_scanned = true;
    const base::Status scales = checkpoint->CheckAllE8M0();
    if (!scales.ok()) report.scale_error = scales.message();
  }
  return report;
}

std::string FormatInspectReport(const InspectReport& report, int max_listed) {
  std::string out = fmt::format("model: {}\n", report.dir.string());
  out += DescribeModelConfig(report.config);
  out += fmt::format("checkpoint: {} shard(s), {} tensors, {} bytes\n", report.num_shards,
                     report.num_tensors, report.total_bytes);
  out += "parameters by part:\n";
  for (int part = 0; part < kNumModelParts; ++part) {
    const int64_t n = report.parameters_by_part[part];
    out += fmt::format("  {:<9} {:>16} ({})\n", ModelPartName(static_cast<ModelPart>(part)), n,
                       FormatCount(n));
  }
  out += fmt::format("  {:<9} {:>16} ({})\n", "total", report.total_parameters(),
                     FormatCount(report.total_parameters()));
  out += "bytes by dtype:\n";
  for (const auto& [dtype, bytes] : report.bytes_by_dtype) {
    out += fmt::format("  {:<9} {:>16}\n", dtype, bytes);
  }
  const SchemaCheckResult& check = report.check;
  AppendList(out, "missing tensors", check.missing, max_listed);
  AppendList(out, "extra tensors", check.extra, max_listed);
  if (!check.mismatched.empty()) {
    out += fmt::format("mismatched tensors ({}):\n", check.mismatched.size());
    for (size_t i = 0; i < check.mismatched.size() && i < static_cast<size_t>(max_listed); ++i) {
      const TensorMismatch& m = check.mismatched[i];
      out += fmt::format("  {}: expected {}, found {}\n", m.name, m.expected, m.actual);
    }
  }
  if (!check.unchecked.empty()) {
    out += fmt::format("unchecked DSpark/vision tensors: {}\n", check.unchecked.size());
  }
  if (report.scales_scanned) {
    out += report.scale_error.empty() ? "E8M0 scales: no NaN bytes\n"
                                      : fmt::format("E8M0 scales: {}\n", report.scale_error);
  }
  if (check.ok() && report.scale_error.empty()) {
    out += fmt::format("all {} expected tensors valid\n", check.num_checked);
  } else if (check.ok()) {
    out += "INVALID: E8M0 scale holds NaN (255)\n";
  } else {
    out += fmt::format("INVALID: {} missing, {} extra, {} mismatched ({} valid)\n",
                       check.missing.size(), check.extra.size(), check.mismatched.size(),
                       check.num_checked);
  }
  return out;
}

}  // namespace deepinfer::io

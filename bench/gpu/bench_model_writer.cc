// WriteBenchModel: the files of the GPU benchmark checkpoint (bench_model_spec.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <system_error>

#include "base/clock.h"
#include "bench/gpu/bench_model_spec.h"
#include "fmt/format.h"
#include "io/checkpoint_schema.h"
#include "io/safetensors.h"
#include "io/safetensors_writer.h"
#include "model/demo_model.h"
#include "model/engram_hash.h"

namespace deepinfer::bench {
namespace {

namespace fs = std::filesystem;

base::Status ErrnoError(const std::string& what, const fs::path& path) {
  return base::UnavailableError(what + " " + path.string() + ": " + std::strerror(errno));
}

// Writes the file through a shared mapping: header, then the data filled in parallel.
// Goes to `path`.tmp, renamed into place when complete.
base::Status WriteSafetensors(const fs::path& path, const CheckpointPlan& plan, uint64_t seed,
                              int threads) {
  const fs::path tmp = path.string() + ".tmp";
  const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return ErrnoError("cannot create", tmp);
  const uint64_t size = plan.file_bytes();
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    const base::Status status = ErrnoError("cannot size", tmp);
    ::close(fd);
    return status;
  }
  void* map = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (map == MAP_FAILED) {
    const base::Status status = ErrnoError("cannot mmap", tmp);
    ::close(fd);
    return status;
  }
  auto* bytes = static_cast<uint8_t*>(map);
  const uint64_t header_len = plan.header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<uint8_t>(header_len >> (8 * i));
  std::memcpy(bytes + 8, plan.header.data(), header_len);
  FillCheckpoint(plan, seed, threads, bytes + 8 + header_len);
  ::munmap(map, size);
  if (::close(fd) != 0) return ErrnoError("cannot close", tmp);
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return base::UnavailableError("cannot rename " + tmp.string() + ": " + ec.message());
  return base::Status::Ok();
}

std::string Gigabytes(uint64_t bytes) { return fmt::format("{:.3f} GB", bytes / 1e9); }

}  // namespace

std::string BenchModelSummary::ToString() const {
  std::string line = fmt::format("make_bench_model: {} tensors", num_tensors);
  for (const auto& [cls, bytes] : bytes_by_class)
    line += fmt::format(", {} {}", cls, Gigabytes(bytes));
  line += fmt::format(", total {} in {:.1f} s (safetensors {:.1f} s, {:.2f} GB/s)",
                      Gigabytes(total_bytes), seconds, write_seconds,
                      write_seconds > 0 ? total_bytes / 1e9 / write_seconds : 0.0);
  return line;
}

base::StatusOr<BenchModelSummary> WriteBenchModel(const fs::path& dir,
                                                  const BenchModelOptions& options) {
  const base::Stopwatch stopwatch;
  DI_RETURN_IF_ERROR(CheckBenchPreset(options.preset));
  DI_ASSIGN_OR_RETURN(const io::ModelConfig config,
                      model::StartGeneratedCheckpoint(dir, options.tokenizer_json, "bench model",
                                                      [&](int64_t compressed_vocab) {
                                                        return BenchModelConfigJson(
                                                            options.scale, compressed_vocab);
                                                      }));

  const CheckpointPlan plan = PlanCheckpoint(config);
  const base::Stopwatch write_stopwatch;
  DI_RETURN_IF_ERROR(
      WriteSafetensors(dir / "model.safetensors", plan, options.seed, options.threads));
  std::map<std::string, std::string> weight_map;
  for (const PlannedTensor& t : plan.tensors) weight_map[t.name] = "model.safetensors";
  DI_RETURN_IF_ERROR(io::WriteSafetensorsIndex(dir, plan.data_bytes, weight_map));

  BenchModelSummary summary;
  summary.bytes_by_class = BytesByClass(plan);
  summary.total_bytes = plan.file_bytes();
  summary.num_tensors = static_cast<int>(plan.tensors.size());
  summary.seconds = stopwatch.ElapsedSeconds();
  summary.write_seconds = write_stopwatch.ElapsedSeconds();
  return summary;
}

base::StatusOr<int64_t> VerifyBenchModel(const fs::path& dir) {
  DI_ASSIGN_OR_RETURN(const io::ModelConfig config, io::LoadModelConfig(dir / "config.json"));
  DI_ASSIGN_OR_RETURN(const auto file, io::SafetensorsFile::Open(dir / "model.safetensors"));
  std::vector<io::ActualTensor> actual;
  for (const auto& info : file->tensors()) {
    actual.push_back({info.name, info.dtype, info.shape.ToVector()});
  }
  const io::SchemaCheckResult check =
      io::CheckTensorsAgainstSchema(config, io::ExpectedTensors(config), actual);
  if (!check.ok() || !check.unchecked.empty()) {
    return base::InvalidArgumentError(
        fmt::format("{}: {} missing, {} extra, {} mismatched, {} unchecked tensors (first: {})",
                    (dir / "model.safetensors").string(), check.missing.size(), check.extra.size(),
                    check.mismatched.size(), check.unchecked.size(),
                    !check.missing.empty()      ? check.missing[0]
                    : !check.extra.empty()      ? check.extra[0]
                    : !check.mismatched.empty() ? check.mismatched[0].name
                    : !check.unchecked.empty()  ? check.unchecked[0]
                                                : std::string()));
  }
  DI_RETURN_IF_ERROR(
      model::DeriveEngramHashConstants(config.text_config, (dir / "tokenizer.json").string())
          .status());
  return check.num_checked;
}

}  // namespace deepinfer::bench

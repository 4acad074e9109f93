#include "io/safetensors_writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

namespace deepinfer::io {
namespace {

using base::InvalidArgumentError;
using base::Status;
using nlohmann::json;

std::string DescribeShape(tensor::DType dtype, const std::vector<int64_t>& shape) {
  return fmt::format("{}[{}]", tensor::DTypeName(dtype), fmt::join(shape, ", "));
}

uint64_t AlignUp(uint64_t value, uint64_t alignment) {
  return (value + alignment - 1) / alignment * alignment;
}

// Writes `contents` to `path` through a temporary file in the same directory.
Status WriteAtomically(const std::filesystem::path& path,
                       const std::function<bool(std::ofstream&)>& write) {
  const std::filesystem::path tmp =
      path.string() + fmt::format(".tmp{}", static_cast<long>(::getpid()));
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return base::UnavailableError(fmt::format("{}: cannot create", tmp.string()));
    if (!write(out) || !out.flush()) {
      out.close();
      std::remove(tmp.c_str());
      return base::UnavailableError(fmt::format("{}: write failed", path.string()));
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return base::UnavailableError(
        fmt::format("{}: rename failed: {}", path.string(), ec.message()));
  }
  return Status::Ok();
}

}  // namespace

Status SafetensorsWriter::Add(std::string name, tensor::DType dtype, std::vector<int64_t> shape,
                              std::span<const uint8_t> bytes) {
  if (name.empty() || name == "__metadata__") {
    return InvalidArgumentError(fmt::format("safetensors writer: invalid tensor name '{}'", name));
  }
  if (names_.contains(name)) {
    return InvalidArgumentError(fmt::format("safetensors writer: duplicate tensor '{}'", name));
  }
  if (shape.size() > static_cast<size_t>(tensor::kMaxRank)) {
    return InvalidArgumentError(
        fmt::format("safetensors writer: tensor '{}': rank too large", name));
  }
  const int64_t n = tensor::CheckedNumElements(shape);
  const auto needed = n < 0 ? std::nullopt : tensor::DTypeStorageBytes(dtype, n);
  if (!needed || *needed != bytes.size()) {
    return InvalidArgumentError(fmt::format(
        "safetensors writer: tensor '{}': {} bytes given, {} needs {}", name, bytes.size(),
        DescribeShape(dtype, shape), needed ? std::to_string(*needed) : "an invalid size"));
  }
  names_.insert(name);
  tensors_.push_back({std::move(name), dtype, std::move(shape), {bytes.begin(), bytes.end()}});
  return Status::Ok();
}

Status SafetensorsWriter::Add(std::string name, const tensor::TensorView& view) {
  if (!view.device().is_host() || !view.IsContiguous()) {
    return InvalidArgumentError(
        fmt::format("safetensors writer: tensor '{}' is not a contiguous host view", name));
  }
  const std::span<const uint8_t> bytes =
      view.NumElements() == 0 ? std::span<const uint8_t>() : view.bytes();
  return Add(std::move(name), view.dtype(), view.shape().ToVector(), bytes);
}

uint64_t SafetensorsWriter::data_bytes() const {
  uint64_t total = 0;
  for (const Pending& t : tensors_) total += t.bytes.size();
  return total;
}

std::vector<std::string> SafetensorsWriter::names() const {
  std::vector<std::string> result;
  for (const Pending& t : tensors_) result.push_back(t.name);
  return result;
}

Status SafetensorsWriter::WriteFile(const std::filesystem::path& path) const {
  // Lay out the data section: each tensor aligned to its element size.
  std::vector<uint64_t> offsets;
  uint64_t cursor = 0;
  json header = json::object();
  for (const Pending& t : tensors_) {
    const uint64_t alignment = std::max(1, tensor::DTypeBits(t.dtype) / 8);
    cursor = AlignUp(cursor, alignment);
    offsets.push_back(cursor);
    header[t.name] = {{"dtype", tensor::SafetensorsDTypeName(t.dtype)},
                      {"shape", t.shape},
                      {"data_offsets", {cursor, cursor + t.bytes.size()}}};
    cursor += t.bytes.size();
  }
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  std::string text = header.dump();
  text.append(AlignUp(8 + text.size(), 8) - 8 - text.size(), ' ');
  const uint64_t data_size = cursor;

  return WriteAtomically(path, [&](std::ofstream& out) {
    uint8_t prefix[8];
    uint64_t len = text.size();
    for (int i = 0; i < 8; ++i) prefix[i] = static_cast<uint8_t>(len >> (8 * i));
    out.write(reinterpret_cast<const char*>(prefix), 8);
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    uint64_t written = 0;
    const char zeros[8] = {};
    for (size_t i = 0; i < tensors_.size(); ++i) {
      out.write(zeros, static_cast<std::streamsize>(offsets[i] - written));
      out.write(reinterpret_cast<const char*>(tensors_[i].bytes.data()),
                static_cast<std::streamsize>(tensors_[i].bytes.size()));
      written = offsets[i] + tensors_[i].bytes.size();
    }
    return written == data_size && static_cast<bool>(out);
  });
}

Status WriteSafetensorsIndex(const std::filesystem::path& dir, uint64_t total_size,
                             const std::map<std::string, std::string>& weight_map) {
  json index = {{"metadata", {{"total_size", total_size}}}, {"weight_map", weight_map}};
  const std::string text = index.dump(1) + "\n";
  return WriteAtomically(dir / "model.safetensors.index.json", [&](std::ofstream& out) {
    out.write(text.data(), static_cast<std::streamsize>(text.size()));
    return static_cast<bool>(out);
  });
}

}  // namespace deepinfer::io

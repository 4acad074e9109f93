// safetensors reader: memory-maps a file and validates its header.
//
// File layout: u64 little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}
// then the data section; offsets are relative to the data section start (8 + N).
//
// Every malformed input (short file, header larger than the file, malformed JSON, unknown
// dtype, shape/size mismatch, offsets out of range or overlapping, duplicate names, bad
// metadata) is reported as a Status whose message names the file and, where there is one,
// the tensor. Nothing here aborts on bad input.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace deepinfer::io {

struct SafetensorsTensorInfo {
  std::string name;
  tensor::DType dtype = tensor::DType::kF32;
  tensor::Shape shape;
  uint64_t begin = 0;  // byte offsets inside the data section, [begin, end)
  uint64_t end = 0;
  uint64_t size_bytes() const { return end - begin; }
};

struct SafetensorsHeader {
  // Sorted by name. Names are unique.
  std::vector<SafetensorsTensorInfo> tensors;
  std::map<std::string, std::string> metadata;  // "__metadata__", may be empty
  uint64_t data_offset = 0;                     // 8 + header length
};

// Upper bound accepted for the JSON header (real checkpoints stay well below 100 MiB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates a complete file image (prefix, header, data). `label` names the file
// in messages. This is the entry point the fuzzer exercises.
base::StatusOr<SafetensorsHeader> ParseSafetensors(std::span<const uint8_t> file_bytes,
                                                   std::string_view label);

// Parses the JSON header text alone, validating offsets against a data section of
// `data_size` bytes.
base::StatusOr<SafetensorsHeader> ParseSafetensorsHeaderJson(std::string_view json,
                                                             uint64_t data_size,
                                                             std::string_view label);

// InvalidArgument "tensor 'NAME': F8_E8M0 scale byte 255 (NaN) at element I" if `bytes`
// contains 255; E8M0 NaN scales are rejected on load (model.md §4.3).
base::Status CheckE8M0Bytes(std::span<const uint8_t> bytes, std::string_view name);

// A read-only memory-mapped safetensors file. Views stay valid while the object lives.
class SafetensorsFile {
 public:
  static base::StatusOr<std::unique_ptr<SafetensorsFile>> Open(const std::filesystem::path& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  const std::vector<SafetensorsTensorInfo>& tensors() const { return header_.tensors; }
  const std::map<std::string, std::string>& metadata() const { return header_.metadata; }
  uint64_t file_size() const { return size_; }

  // nullptr if absent.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  // NotFound naming file and tensor if absent.
  base::StatusOr<const SafetensorsTensorInfo*> Info(std::string_view name) const;
  // Raw bytes of a tensor (always available, any alignment).
  std::span<const uint8_t> Bytes(const SafetensorsTensorInfo& info) const;
  base::StatusOr<std::span<const uint8_t>> Bytes(std::string_view name) const;
  // A host TensorView over the mapping (read-only memory). FailedPrecondition if the data
  // is not aligned to the element size (files written by us and by HF are aligned).
  base::StatusOr<tensor::TensorView> Get(std::string_view name) const;
  base::StatusOr<tensor::TensorView> Get(const SafetensorsTensorInfo& info) const;

 private:
  SafetensorsFile() = default;

  std::filesystem::path path_;
  const uint8_t* map_ = nullptr;
  uint64_t size_ = 0;
  SafetensorsHeader header_;
  std::map<std::string, size_t, std::less<>> index_;  // name -> position in tensors
};

}  // namespace deepinfer::io

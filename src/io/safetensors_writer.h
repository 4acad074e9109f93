// safetensors writer (for the demo-model generator, tests and tools).
//
// Tensors are written in the order they were added; each tensor's data offset is padded up
// to a multiple of its element size (at least 1 byte), and the JSON header is padded with
// spaces so that the data section starts at a multiple of 8. The output reads back with
// SafetensorsFile and with the Python `safetensors` package.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

namespace deepinfer::io {

class SafetensorsWriter {
 public:
  // Copies `bytes`; its size must equal the storage size of dtype x shape. Names must be
  // unique and not "__metadata__".
  base::Status Add(std::string name, tensor::DType dtype, std::vector<int64_t> shape,
                   std::span<const uint8_t> bytes);
  base::Status Add(std::string name, const tensor::TensorView& view);  // contiguous host view
  void SetMetadata(std::map<std::string, std::string> metadata) { metadata_ = std::move(metadata); }

  size_t num_tensors() const { return tensors_.size(); }
  uint64_t data_bytes() const;  // total of tensor byte sizes (unpadded), for "total_size"
  std::vector<std::string> names() const;

  // Writes the file (atomically: a temporary file renamed into place). Error names the path.
  base::Status WriteFile(const std::filesystem::path& path) const;

 private:
  struct Pending {
    std::string name;
    tensor::DType dtype;
    std::vector<int64_t> shape;
    std::vector<uint8_t> bytes;
  };
  std::vector<Pending> tensors_;
  std::set<std::string, std::less<>> names_;
  std::map<std::string, std::string> metadata_;
};

// Writes `model.safetensors.index.json` in `dir`:
//   {"metadata": {"total_size": total_size}, "weight_map": {name: file, ...}}
base::Status WriteSafetensorsIndex(const std::filesystem::path& dir, uint64_t total_size,
                                   const std::map<std::string, std::string>& weight_map);

}  // namespace deepinfer::io

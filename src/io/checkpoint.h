// A (possibly sharded) safetensors checkpoint directory.
//
// Open(dir) reads `model.safetensors.index.json` ({"metadata": {...}, "weight_map":
// {name: shard file}}) when present and maps every shard it names; otherwise it maps
// `model.safetensors`. Every name of the weight map must exist in the shard it points to;
// a tensor present in two shards is an error. Tensors present in a shard but not listed in
// the index are still served (and reported by UnlistedTensors()).
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"
#include "io/safetensors.h"
#include "tensor/tensor.h"

namespace deepinfer::io {

inline constexpr std::string_view kIndexFileName = "model.safetensors.index.json";
inline constexpr std::string_view kSingleShardFileName = "model.safetensors";

class Checkpoint {
 public:
  static base::StatusOr<std::unique_ptr<Checkpoint>> Open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& shards() const { return shards_; }
  // All tensor names, sorted.
  std::vector<std::string> TensorNames() const;
  size_t num_tensors() const { return entries_.size(); }
  bool Contains(std::string_view name) const { return entries_.find(name) != entries_.end(); }

  // nullptr if absent.
  const SafetensorsTensorInfo* Find(std::string_view name) const;
  // NotFound "tensor 'X' not found in checkpoint DIR" if absent.
  base::StatusOr<const SafetensorsTensorInfo*> Info(std::string_view name) const;
  base::StatusOr<tensor::TensorView> Get(std::string_view name) const;
  base::StatusOr<std::span<const uint8_t>> Bytes(std::string_view name) const;
  // The shard holding `name` (nullptr if absent).
  const SafetensorsFile* ShardOf(std::string_view name) const;
  // InvalidArgument naming the tensor and the first offending index if an F8_E8M0 tensor
  // holds the NaN byte 255 (model.md §4.3: reject at load). OK for other dtypes.
  base::Status CheckE8M0(std::string_view name) const;
  // CheckE8M0 over every F8_E8M0 tensor (reads all scale bytes).
  base::Status CheckAllE8M0() const;
  // Names found in shards but missing from the index's weight map (sorted).
  const std::vector<std::string>& UnlistedTensors() const { return unlisted_; }

 private:
  struct Entry {
    const SafetensorsFile* shard;
    const SafetensorsTensorInfo* info;
  };
  Checkpoint() = default;
  base::Status AddShardTensors(const SafetensorsFile& shard);

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> shards_;
  std::map<std::string, Entry, std::less<>> entries_;
  std::vector<std::string> unlisted_;
};

}  // namespace deepinfer::io

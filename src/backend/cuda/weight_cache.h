// Device copies of checkpoint weights in their stored precision (FP8 stays e4m3 + e8m0
// scales, MXFP4 stays packed nibbles, BF16 stays bf16), uploaded once on first request.
//
// Contract: a WeightRef's host bytes (a read-only checkpoint mapping) stay unchanged and
// mapped for the lifetime of the cache; entries are keyed by (data, scale, format, shape).
// A WeightRef whose data (and scale) already point to device memory is used in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "backend/cuda/kernels.h"
#include "base/statusor.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda {

// Stored byte sizes of a weight (data and e8m0 scales); InvalidArgument naming the tensor
// if its shape does not fit its format (e.g. MXFP4 cols not a multiple of 32).
struct StoredBytes {
  size_t data = 0;
  size_t scale = 0;
};
base::StatusOr<StoredBytes> StoredSize(const model::WeightRef& w);

class WeightCache {
 public:
  WeightCache() = default;
  ~WeightCache();
  WeightCache(const WeightCache&) = delete;
  WeightCache& operator=(const WeightCache&) = delete;

  // The device view of `w`, uploading it (synchronously) the first time.
  base::StatusOr<kernels::DeviceWeight> Get(const model::WeightRef& w);
  size_t bytes() const;

 private:
  struct Key {
    const void* data;
    const uint8_t* scale;
    model::WeightFormat format;
    int64_t rows, cols;
    bool operator==(const Key&) const = default;
  };
  struct KeyHash {
    size_t operator()(const Key& k) const;
  };
  struct Entry {
    kernels::DeviceWeight view;
    void* owned_data = nullptr;
    void* owned_scale = nullptr;
  };

  mutable std::mutex mu_;
  std::unordered_map<Key, Entry, KeyHash> entries_;
  size_t bytes_ = 0;
};

}  // namespace deepinfer::backend::cuda

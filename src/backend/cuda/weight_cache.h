// Device copies of checkpoint weights in their stored precision (FP8 stays e4m3 + e8m0
// scales, MXFP4 stays packed nibbles, BF16 stays bf16), uploaded once on first request.
//
// Entries are keyed by (data, scale, format, shape). Because a later checkpoint mapping can
// reuse the addresses of an unmapped one, each entry also keeps a fingerprint of its host
// bytes (the first and last 256 bytes of data and scale); a mismatch re-uploads. Clear()
// drops everything (call it when a checkpoint is unloaded). A WeightRef whose data (and
// scale) already point to device memory is used in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
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
  // Derived device copies of an uploaded weight, made on first request and freed with it: the
  // bf16 [rows, cols] copy (exact, cuBLAS bf16 GEMMs) and the FP8 copy re-blocked to 128 x 128
  // scales (kernels_block128.h, cuBLASLt's block-scaled FP8 GEMM).
  // kExpertBlock128: an MXFP4 expert matrix as e4m3 at 128 x 128 scales (kernels_moe_block128.h).
  enum class CopyKind { kBf16 = 0, kFp8Block128 = 1, kExpertBlock128 = 2 };
  static constexpr int kCopyKinds = static_cast<int>(CopyKind::kExpertBlock128) + 1;
  // The `kind` copy (`bytes` long) of the uploaded weight whose device view is `view` (the view
  // Get returned), made on the first request by make(view, out), which enqueues the work that
  // fills the fresh device buffer `out` (in stream order before any use of the copy). nullptr
  // (not an error) when `view` is no uploaded weight of this cache, when the copies of this
  // kind would exceed `budget_bytes` together, when less than `keep_free_bytes` of device
  // memory would stay free (remembered: that weight is not asked again for this kind), or
  // when the allocation or `make` fails.
  using CopyMaker = std::function<cudaError_t(const kernels::DeviceWeight&, void*)>;
  const void* DerivedCopy(const kernels::DeviceWeight& view, CopyKind kind, size_t bytes,
                          size_t budget_bytes, size_t keep_free_bytes, const CopyMaker& make);
  // Frees every uploaded weight and derived copy (synchronises the device).
  void Clear();
  // Called before a device copy of a weight is freed: the owner issues any work it has
  // recorded but not yet enqueued that may still read it (StreamTape).
  void set_before_free(std::function<void()> f) { before_free_ = std::move(f); }
  size_t bytes() const;
  size_t copy_bytes(CopyKind kind) const;

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
    size_t owned_bytes = 0;
    uint64_t fingerprint = 0;            // of the host bytes (0 for device-resident weights)
    void* copy[kCopyKinds] = {};         // DerivedCopy's buffers by kind, if made
    size_t copy_size[kCopyKinds] = {};   // their bytes
    bool copy_refused[kCopyKinds] = {};  // device memory was short for that copy
  };
  void FreeEntry(Entry& entry);

  mutable std::mutex mu_;
  std::function<void()> before_free_;
  std::unordered_map<Key, Entry, KeyHash> entries_;
  // Uploaded entries by their device data pointer (DerivedCopy's lookup); erased with the entry.
  std::unordered_map<const void*, Key> by_device_data_;
  size_t bytes_ = 0;
  size_t copy_bytes_[kCopyKinds] = {};  // derived copies by kind, all entries
};

}  // namespace deepinfer::backend::cuda

// The tensor-map cache of k_linear_bulk.cu (tensor_map_cache.h).
#include "backend/cuda/tensor_map_cache.h"

#include <cuda.h>  // CUtensorMap and its enums only: no libcuda link (see TensorMapEncoder)
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <mutex>
#include <unordered_map>

namespace deepinfer::backend::cuda::kernels {
namespace {

static_assert(sizeof(CUtensorMap) == kTensorMapBytes, "kTensorMapBytes is sizeof(CUtensorMap)");

bool SameView(const BulkTensorView& a, const BulkTensorView& b) {
  return a.rank == b.rank && a.base == b.base && a.dims[0] == b.dims[0] && a.dims[1] == b.dims[1] &&
         a.dims[2] == b.dims[2] && a.strides[0] == b.strides[0] && a.strides[1] == b.strides[1] &&
         a.box[0] == b.box[0] && a.box[1] == b.box[1] && a.box[2] == b.box[2];
}

struct ViewHash {
  size_t operator()(const BulkTensorView& v) const {
    uint64_t h = reinterpret_cast<uintptr_t>(v.base);
    for (uint64_t x : {v.dims[0], v.dims[1], v.dims[2], uint64_t{v.box[2]}}) {
      h = h * 0x9E3779B97F4A7C15ull ^ x;
    }
    return static_cast<size_t>(h ^ (h >> 29));
  }
};
struct ViewEqual {
  bool operator()(const BulkTensorView& a, const BulkTensorView& b) const { return SameView(a, b); }
};

// The driver's cuTensorMapEncodeTiled, through the runtime (the target does not link
// libcuda); null when the driver does not have it.
PFN_cuTensorMapEncodeTiled_v12000 TensorMapEncoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encoder = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                         &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();  // leave no error behind for the caller's next check
      fn = nullptr;
    }
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encoder;
}

// Encoded maps by view, process-wide, and the views the driver rejected (not retried). A
// view fixes its map completely (same view, same bytes), so an entry never goes stale; the
// cache is emptied when it reaches kMaxMaps views (weights of one model: a few hundred).
class TensorMapCache {
 public:
  static constexpr size_t kMaxMaps = 4096;

  cudaError_t Get(const BulkTensorView& view, void* map) {
    std::lock_guard<std::mutex> lock(mu_);
    const auto it = maps_.find(view);
    if (it != maps_.end()) {
      if (!it->second.ok) return cudaErrorInvalidValue;
      std::memcpy(map, &it->second.map, kTensorMapBytes);
      return cudaSuccess;
    }
    const PFN_cuTensorMapEncodeTiled_v12000 encode = TensorMapEncoder();
    if (encode == nullptr) return cudaErrorNotSupported;
    const cuuint32_t element_strides[3] = {1, 1, 1};
    Entry entry{};
    entry.ok = encode(&entry.map, CU_TENSOR_MAP_DATA_TYPE_UINT8, static_cast<cuuint32_t>(view.rank),
                      const_cast<void*>(view.base), view.dims, view.strides, view.box,
                      element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
    if (maps_.size() >= kMaxMaps) {
      maps_.clear();
      encoded_ = 0;
    }
    maps_.emplace(view, entry);
    if (!entry.ok) return cudaErrorInvalidValue;
    ++encoded_;
    std::memcpy(map, &entry.map, kTensorMapBytes);
    return cudaSuccess;
  }

  int64_t Encoded() {
    std::lock_guard<std::mutex> lock(mu_);
    return encoded_;
  }

 private:
  struct Entry {
    CUtensorMap map;
    bool ok;
  };
  std::mutex mu_;
  std::unordered_map<BulkTensorView, Entry, ViewHash, ViewEqual> maps_;
  int64_t encoded_ = 0;  // entries with ok
};

TensorMapCache& Maps() {
  static TensorMapCache* cache = new TensorMapCache();  // never destroyed (no exit-order issue)
  return *cache;
}

}  // namespace

cudaError_t EncodeBulkTensorMap(const BulkTensorView& view, void* map) {
  return Maps().Get(view, map);
}

int64_t LinearBulkTensorMapsCached() { return Maps().Encoded(); }

}  // namespace deepinfer::backend::cuda::kernels

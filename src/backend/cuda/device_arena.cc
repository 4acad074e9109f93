#include "backend/cuda/device_arena.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <functional>
#include <string>

namespace deepinfer::backend::cuda {

DeviceArena::~DeviceArena() {
  for (auto& [p, size] : live_) cudaFree(p);
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) cudaFree(p);
  }
}

size_t DeviceArena::RoundUp(size_t bytes) {
  if (bytes == 0) bytes = 1;
  constexpr size_t kSmall = 64 * 1024;
  if (bytes <= kSmall) return (bytes + 511) / 512 * 512;
  size_t pow2 = kSmall;
  while (pow2 * 2 < bytes) pow2 *= 2;  // pow2 < bytes <= 2 * pow2
  const size_t step = pow2 / 4;
  return (bytes + step - 1) / step * step;
}

base::StatusOr<void*> DeviceArena::Allocate(size_t bytes) {
  const size_t size = RoundUp(bytes);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = cached_.find(size);
  if (it != cached_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    bytes_cached_ -= size;
    live_.emplace(p, size);
    bytes_live_ += size;
    return p;
  }
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, size);
  if (e == cudaErrorMemoryAllocation && bytes_cached_ > 0) {
    cudaGetLastError();  // clear the error, give the cache back and retry once
    DI_RETURN_IF_ERROR(TrimLocked());
    e = cudaMalloc(&p, size);
  }
  if (e != cudaSuccess) {
    cudaGetLastError();
    return base::ResourceExhaustedError("cudaMalloc of " + std::to_string(size) +
                                        " bytes failed: " + cudaGetErrorString(e) + " (" +
                                        std::to_string(bytes_live_) + " bytes live)");
  }
  live_.emplace(p, size);
  bytes_live_ += size;
  return p;
}

base::Status DeviceArena::Release(void* p) {
  if (p == nullptr) return base::Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(p);
  if (it == live_.end()) {
    return base::InvalidArgumentError("device pointer was not allocated by this backend");
  }
  const size_t size = it->second;
  live_.erase(it);
  bytes_live_ -= size;
  // Kept sorted by descending address, so Allocate hands out the lowest cached address of
  // the class: the addresses a sequence of Allocate / Release calls gets depend only on the
  // cached set it starts from, not on the order earlier blocks were released in. A decode
  // step then sees the same addresses every step, which is what lets a CUDA graph of it be
  // replayed (stream_tape.h).
  std::vector<void*>& blocks = cached_[size];
  blocks.insert(std::upper_bound(blocks.begin(), blocks.end(), p, std::greater<void*>()), p);
  bytes_cached_ += size;
  return base::Status::Ok();
}

base::Status DeviceArena::Trim() {
  std::lock_guard<std::mutex> lock(mu_);
  return TrimLocked();
}

base::Status DeviceArena::TrimLocked() {
  if (bytes_cached_ > 0 && before_trim_) before_trim_();
  base::Status status;
  for (auto& [size, blocks] : cached_) {
    for (void* p : blocks) {
      const cudaError_t e = cudaFree(p);  // synchronises the device: pending users are done
      if (e != cudaSuccess && status.ok()) {
        status = base::InternalError(std::string("cudaFree failed: ") + cudaGetErrorString(e));
      }
    }
  }
  cached_.clear();
  bytes_cached_ = 0;
  return status;
}

size_t DeviceArena::bytes_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_live_;
}

size_t DeviceArena::bytes_cached() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_cached_;
}

}  // namespace deepinfer::backend::cuda

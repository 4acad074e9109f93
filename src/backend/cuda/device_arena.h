// A caching device-memory allocator: plain cudaMalloc blocks (no managed memory), kept in
// per-size-class free lists after Release so that the model's many short-lived scratch
// arrays never hit cudaMalloc/cudaFree (which synchronise the device) in steady state.
//
// Stream-ordering contract: the backend issues all work on one stream, so a block released
// after enqueuing kernels that use it may be handed out again at once; the next user's work
// is ordered after those kernels by the stream. (A graph's side lane runs on a second stream:
// the backend holds blocks released there until the lanes join, CudaBackend::ReleaseDevice.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "base/statusor.h"

namespace deepinfer::backend::cuda {

class DeviceArena {
 public:
  DeviceArena() = default;
  ~DeviceArena();  // cudaFree of every block (cached or still live)
  DeviceArena(const DeviceArena&) = delete;
  DeviceArena& operator=(const DeviceArena&) = delete;

  // A block of at least `bytes` (>= 1), 256-byte aligned. ResourceExhausted when the device
  // is out of memory even after the cache was returned to the driver.
  base::StatusOr<void*> Allocate(size_t bytes);
  // Returns a block from Allocate to the cache. InvalidArgument for any other pointer.
  base::Status Release(void* p);
  // Frees every cached (not live) block back to the driver.
  base::Status Trim();
  // Called (with the arena's lock held) before a trim frees cached blocks: the owner issues
  // any work it has recorded but not yet enqueued that may still use them (StreamTape).
  void set_before_trim(std::function<void()> f) { before_trim_ = std::move(f); }

  size_t bytes_live() const;
  size_t bytes_cached() const;

  // Size class of a request: multiples of 512 B up to 64 KiB, then 4 steps per power of two.
  static size_t RoundUp(size_t bytes);

 private:
  base::Status TrimLocked();

  mutable std::mutex mu_;
  std::unordered_map<void*, size_t> live_;  // block -> class size
  // class size -> free blocks, by descending address (the lowest is reused first)
  std::unordered_map<size_t, std::vector<void*>> cached_;
  size_t bytes_live_ = 0;
  size_t bytes_cached_ = 0;
  std::function<void()> before_trim_;
};

}  // namespace deepinfer::backend::cuda

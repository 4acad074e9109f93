#include "backend/cuda/weight_cache.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <string>

namespace deepinfer::backend::cuda {
namespace {

using model::WeightFormat;

bool IsDevicePointer(const void* p) {
  if (p == nullptr) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();  // plain host memory on old drivers: not an error for us
    return false;
  }
  return attributes.type == cudaMemoryTypeDevice || attributes.type == cudaMemoryTypeManaged;
}

base::Status Upload(const void* host, size_t bytes, const std::string& what, void** out) {
  cudaError_t e = cudaMalloc(out, bytes);
  if (e == cudaSuccess) e = cudaMemcpy(*out, host, bytes, cudaMemcpyHostToDevice);
  // A pageable cudaMemcpy may return before its DMA lands, and the backend's stream does
  // not synchronise with the legacy stream: wait, so no kernel reads a half-copied weight.
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (*out) cudaFree(*out);
    *out = nullptr;
    return base::ResourceExhaustedError("uploading " + what + " (" + std::to_string(bytes) +
                                        " bytes): " + cudaGetErrorString(e));
  }
  return base::Status::Ok();
}

// Mixes the bytes [begin, end) of b into h, 8 at a time (FNV-1a steps over 64-bit words,
// the last partial word zero-padded). Get runs this on every Linear of a host-uploaded
// weight: a word per step keeps it at ~70 dependent multiplies for 512 bytes (byte steps
// took ~1 us per weight on the decode hot path).
uint64_t MixWords(const uint8_t* b, size_t begin, size_t end, uint64_t h) {
  for (size_t i = begin; i < end; i += 8) {
    uint64_t word = 0;
    std::memcpy(&word, b + i, end - i < 8 ? end - i : 8);
    h = (h ^ word) * 1099511628211ull;
  }
  return h;
}

// A hash of the first and last 256 bytes of a host buffer (all of it when shorter).
uint64_t Fingerprint(const void* p, size_t bytes, uint64_t h) {
  const auto* b = static_cast<const uint8_t*>(p);
  const size_t head = bytes < 256 ? bytes : 256;
  h = MixWords(b, 0, head, h);
  return MixWords(b, bytes - head, bytes, h);
}

}  // namespace

base::StatusOr<StoredBytes> StoredSize(const model::WeightRef& w) {
  if (w.rows < 0 || w.cols <= 0) {
    return base::InvalidArgumentError("weight " + w.name + ": bad shape");
  }
  const size_t rows = static_cast<size_t>(w.rows), cols = static_cast<size_t>(w.cols);
  const size_t col_blocks = (cols + 31) / 32;
  switch (w.format) {
    case WeightFormat::kF32:
      return StoredBytes{rows * cols * 4, 0};
    case WeightFormat::kBF16:
      return StoredBytes{rows * cols * 2, 0};
    case WeightFormat::kFp8Block32:
      return StoredBytes{rows * cols, ((rows + 31) / 32) * col_blocks};
    case WeightFormat::kFp8Row32:
      return StoredBytes{rows * cols, rows * col_blocks};
    case WeightFormat::kMxFp4:
      if (cols % 32 != 0) {
        return base::InvalidArgumentError("weight " + w.name +
                                          ": MXFP4 cols must be a multiple of 32");
      }
      return StoredBytes{rows * cols / 2, rows * cols / 32};
  }
  return base::InvalidArgumentError("weight " + w.name + ": unknown format");
}

size_t WeightCache::KeyHash::operator()(const Key& k) const {
  size_t h = std::hash<const void*>()(k.data);
  h = h * 31 + std::hash<const void*>()(k.scale);
  h = h * 31 + static_cast<size_t>(k.format);
  h = h * 31 + std::hash<int64_t>()(k.rows);
  return h * 31 + std::hash<int64_t>()(k.cols);
}

WeightCache::~WeightCache() { Clear(); }

void WeightCache::FreeEntry(Entry& entry) {
  const bool any_copy =
      std::any_of(entry.copy, entry.copy + kCopyKinds, [](const void* c) { return c != nullptr; });
  if (entry.owned_data || entry.owned_scale || any_copy) {
    if (before_free_) before_free_();
    cudaDeviceSynchronize();  // no kernel still reads it
  }
  if (entry.owned_data) {
    by_device_data_.erase(entry.owned_data);
    cudaFree(entry.owned_data);
  }
  if (entry.owned_scale) cudaFree(entry.owned_scale);
  for (int kind = 0; kind < kCopyKinds; ++kind) {
    if (entry.copy[kind]) cudaFree(entry.copy[kind]);
    copy_bytes_[kind] -= entry.copy_size[kind];
  }
  bytes_ -= entry.owned_bytes;
  entry = Entry{};
}

void WeightCache::Clear() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, entry] : entries_) FreeEntry(entry);
  entries_.clear();
  by_device_data_.clear();
}

namespace {

// Fingerprint of the host-resident parts of a weight.
uint64_t HostFingerprint(const model::WeightRef& w, const StoredBytes& size, bool data_on_host,
                         bool scale_on_host) {
  uint64_t h = 1469598103934665603ull;
  if (data_on_host) h = Fingerprint(w.data, size.data, h);
  if (scale_on_host) h = Fingerprint(w.scale, size.scale, h ^ 0x9e3779b97f4a7c15ull);
  return h;
}

}  // namespace

base::StatusOr<kernels::DeviceWeight> WeightCache::Get(const model::WeightRef& w) {
  const Key key{w.data, w.scale, w.format, w.rows, w.cols};
  DI_ASSIGN_OR_RETURN(const StoredBytes size, StoredSize(w));
  const bool needs_scale = size.scale > 0;
  if (w.data == nullptr || (needs_scale && w.scale == nullptr)) {
    return base::InvalidArgumentError("weight " + w.name + ": missing data or scale");
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (auto it = entries_.find(key); it != entries_.end()) {
    Entry& e = it->second;
    const bool data_on_host = e.owned_data != nullptr, scale_on_host = e.owned_scale != nullptr;
    if (!data_on_host && !scale_on_host) return e.view;  // device-resident: used in place
    if (HostFingerprint(w, size, data_on_host, scale_on_host) == e.fingerprint) return e.view;
    FreeEntry(e);  // same addresses, other bytes: a new mapping
    entries_.erase(it);
  }
  const bool host_data = !IsDevicePointer(w.data);
  const bool host_scale = needs_scale && !IsDevicePointer(w.scale);
  Entry entry;
  entry.fingerprint = HostFingerprint(w, size, host_data, host_scale);
  entry.view = {w.format, w.rows, w.cols, w.data, needs_scale ? w.scale : nullptr};
  if (host_data) {
    DI_RETURN_IF_ERROR(Upload(w.data, size.data, w.name, &entry.owned_data));
    entry.view.data = entry.owned_data;
    entry.owned_bytes += size.data;
  }
  if (host_scale) {
    const base::Status s = Upload(w.scale, size.scale, w.name + " scale", &entry.owned_scale);
    if (!s.ok()) {
      if (entry.owned_data) cudaFree(entry.owned_data);
      return s;
    }
    entry.view.scale = static_cast<const uint8_t*>(entry.owned_scale);
    entry.owned_bytes += size.scale;
  }
  bytes_ += entry.owned_bytes;
  if (entry.owned_data != nullptr) by_device_data_[entry.owned_data] = key;
  entries_.emplace(key, entry);
  return entry.view;
}

const void* WeightCache::DerivedCopy(const kernels::DeviceWeight& view, CopyKind kind, size_t bytes,
                                     size_t budget_bytes, size_t keep_free_bytes,
                                     const CopyMaker& make) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto key = by_device_data_.find(view.data);
  if (key == by_device_data_.end()) return nullptr;
  Entry& e = entries_.at(key->second);
  const int k = static_cast<int>(kind);
  if (e.copy[k] != nullptr) return e.copy[k];
  if (e.copy_refused[k]) return nullptr;
  if (copy_bytes_[k] + bytes > budget_bytes) return nullptr;
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess ||
      free_bytes < bytes + keep_free_bytes) {
    cudaGetLastError();
    e.copy_refused[k] = true;
    return nullptr;
  }
  void* out = nullptr;
  if (cudaMalloc(&out, bytes) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  if (make(e.view, out) != cudaSuccess) {
    cudaGetLastError();
    cudaFree(out);
    return nullptr;
  }
  e.copy[k] = out;
  e.copy_size[k] = bytes;
  copy_bytes_[k] += bytes;
  return out;
}

size_t WeightCache::bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bytes_;
}

size_t WeightCache::copy_bytes(CopyKind kind) const {
  std::lock_guard<std::mutex> lock(mu_);
  return copy_bytes_[static_cast<int>(kind)];
}

}  // namespace deepinfer::backend::cuda

// Owned arrays in backend memory (host memory for the CPU backend).
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>

#include "model/backend.h"

namespace deepinfer::model {

template <typename T>
class DeviceArray {
  static_assert(sizeof(T) == 4, "float or int32 only");

 public:
  DeviceArray() = default;
  // n elements with unspecified contents (Backend::AllocUninitialized): write before reading.
  DeviceArray(Backend* backend, int64_t n)
      : backend_(backend), data_(reinterpret_cast<T*>(backend->AllocUninitialized(n))), n_(n) {}
  // n zero-filled elements.
  static DeviceArray Zeros(Backend* backend, int64_t n) {
    DeviceArray a;
    a.backend_ = backend;
    a.n_ = n;
    if constexpr (std::is_same_v<T, float>) {
      a.data_ = backend->AllocFloats(n);
    } else {
      a.data_ = backend->AllocInts(n);
    }
    return a;
  }
  ~DeviceArray() { Reset(); }
  DeviceArray(DeviceArray&& o) noexcept { *this = std::move(o); }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      Reset();
      backend_ = o.backend_, data_ = o.data_, n_ = o.n_;
      o.data_ = nullptr, o.n_ = 0;
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  T* data() const { return data_; }
  int64_t size() const { return n_; }
  void Reset() {
    if (data_) backend_->Free(data_);
    data_ = nullptr, n_ = 0;
  }

 private:
  Backend* backend_ = nullptr;
  T* data_ = nullptr;
  int64_t n_ = 0;
};

using DeviceFloats = DeviceArray<float>;
using DeviceInts = DeviceArray<int32_t>;

// Reused host memory for device-to-host copies (Backend::AllocHostFloats: page-locked on a
// GPU), e.g. a step's logits rows. Grows by doubling, because page-locking is slow
// (milliseconds) and a batch that grows by a row per step must not reallocate every step.
class HostFloats {
 public:
  explicit HostFloats(Backend* backend) : backend_(backend) {}
  ~HostFloats() { backend_->FreeHostFloats(data_); }
  HostFloats(const HostFloats&) = delete;
  HostFloats& operator=(const HostFloats&) = delete;

  // At least n floats (contents unspecified), or null when the backend has none to give.
  float* Reserve(int64_t n) {
    if (n <= capacity_) return data_;
    const int64_t want = n > 2 * capacity_ ? n : 2 * capacity_;
    backend_->FreeHostFloats(data_);
    data_ = backend_->AllocHostFloats(want);
    capacity_ = data_ != nullptr ? want : 0;
    return data_;
  }
  float* data() const { return data_; }
  int64_t capacity() const { return capacity_; }

 private:
  Backend* backend_;
  float* data_ = nullptr;
  int64_t capacity_ = 0;
};

}  // namespace deepinfer::model

// Owned arrays in backend memory (host memory for the CPU backend).
#pragma once

#include <algorithm>
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
  DeviceArray(Backend* backend, int64_t n) : backend_(backend), n_(n) {
    if constexpr (std::is_same_v<T, float>) {
      data_ = backend->AllocFloats(n);
    } else {
      data_ = backend->AllocInts(n);
    }
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

// An append-only matrix of `width`-wide fp32 rows in backend memory (capacity doubles).
class DeviceRows {
 public:
  DeviceRows() = default;
  DeviceRows(Backend* backend, int64_t width) : backend_(backend), width_(width) {}
  int64_t rows() const { return rows_; }
  int64_t width() const { return width_; }
  const float* data() const { return buf_.data(); }
  // Appends n rows copied from backend memory `src` [n, width].
  void Append(const float* src, int64_t n) {
    if (n <= 0) return;
    if ((rows_ + n) * width_ > buf_.size()) {
      const int64_t cap = std::max<int64_t>(rows_ + n, 2 * rows_ + 16);
      DeviceFloats grown(backend_, cap * width_);
      backend_->CopyDevice(grown.data(), buf_.data(), rows_ * width_ * sizeof(float));
      buf_ = std::move(grown);
    }
    backend_->CopyDevice(buf_.data() + rows_ * width_, src, n * width_ * sizeof(float));
    rows_ += n;
  }

 private:
  Backend* backend_ = nullptr;
  int64_t width_ = 0;
  int64_t rows_ = 0;
  DeviceFloats buf_;
};

}  // namespace deepinfer::model

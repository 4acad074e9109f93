// Tensor views and host buffers.
//
// Shape: up to kMaxRank dims, stored inline (no allocation).
// TensorView: a NON-owning (data pointer, dtype, shape, strides, device) tuple. Strides are
//   in ELEMENTS. Sub-byte dtypes (kFP4E2M1) only support contiguous views whose innermost
//   dimension is even (so rows start on a byte boundary). Views over memory-mapped
//   checkpoints are read-only memory: writing through them faults.
// HostBuffer: owning, 64-byte aligned, zero-initialised host memory with a dtype and shape.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/check.h"
#include "tensor/dtype.h"

namespace deepinfer::tensor {

inline constexpr int kMaxRank = 8;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(std::span<const int64_t> dims);

  int rank() const { return rank_; }
  int64_t operator[](int i) const {
    DCHECK(i >= 0 && i < rank_);
    return dims_[i];
  }
  int64_t& operator[](int i) {
    DCHECK(i >= 0 && i < rank_);
    return dims_[i];
  }
  // Product of dims (1 for rank 0). CHECKs against overflow; use CheckedNumElements for
  // untrusted shapes.
  int64_t NumElements() const;
  std::span<const int64_t> dims() const { return {dims_.data(), static_cast<size_t>(rank_)}; }
  std::vector<int64_t> ToVector() const { return {dims().begin(), dims().end()}; }
  // "[2, 3, 4]"
  std::string ToString() const;

  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxRank> dims_{};
  int rank_ = 0;
};

// Product of dims, or -1 if a dim is negative or the product overflows int64.
int64_t CheckedNumElements(std::span<const int64_t> dims);
// Row-major strides (in elements) of a contiguous tensor of `shape`.
Shape ContiguousStrides(const Shape& shape);

enum class DeviceKind : uint8_t { kHost, kCuda };
struct Device {
  DeviceKind kind = DeviceKind::kHost;
  int index = 0;
  static Device Host() { return {}; }
  static Device Cuda(int index) { return {DeviceKind::kCuda, index}; }
  bool is_host() const { return kind == DeviceKind::kHost; }
  friend bool operator==(const Device&, const Device&) = default;
};

class TensorView {
 public:
  TensorView() = default;
  // A contiguous view.
  TensorView(void* data, DType dtype, Shape shape, Device device = Device::Host());
  // A strided view (strides in elements, same rank as shape).
  TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device);

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  const Shape& strides() const { return strides_; }
  Device device() const { return device_; }
  int rank() const { return shape_.rank(); }
  int64_t dim(int i) const { return shape_[i]; }
  int64_t NumElements() const { return shape_.NumElements(); }
  bool IsContiguous() const;
  // Bytes covered by a contiguous view. CHECKs that the view is contiguous.
  uint64_t NumBytes() const;
  bool empty() const { return data_ == nullptr; }

  // Typed pointer; CHECKs that T matches the dtype (uint8_t is also accepted for the 1-byte
  // raw formats F8_E4M3, F8_E8M0, FP4 and I8 (as bytes), and uint16_t for BF16/F16).
  template <typename T>
  T* data() const {
    CHECK(TypeMatches(DTypeOf<T>::value)) << "TensorView::data<" << DTypeName(DTypeOf<T>::value)
                                          << "> on a " << DTypeName(dtype_) << " view";
    return static_cast<T*>(data_);
  }
  std::span<const uint8_t> bytes() const {
    return {static_cast<const uint8_t*>(data_), static_cast<size_t>(NumBytes())};
  }

  // Same data, new shape with the same element count. CHECKs contiguity.
  TensorView Reshape(Shape shape) const;
  // Rows [begin, end) of dim 0 (for FP4, a row is the product of the other dims / 2 bytes).
  TensorView Slice0(int64_t begin, int64_t end) const;

  // "bf16[4, 128] (host)"
  std::string ToString() const;

 private:
  bool TypeMatches(DType requested) const;

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Shape shape_;
  Shape strides_;
  Device device_;
};

// Owning host memory; move-only. The contents are zero-initialised.
class HostBuffer {
 public:
  HostBuffer() = default;
  HostBuffer(DType dtype, Shape shape);
  // Copies `bytes` (must be exactly the storage size of dtype x shape).
  static HostBuffer CopyOf(DType dtype, Shape shape, std::span<const uint8_t> bytes);

  HostBuffer(HostBuffer&&) noexcept = default;
  HostBuffer& operator=(HostBuffer&&) noexcept = default;

  TensorView view() const { return TensorView(data_.get(), dtype_, shape_); }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  uint64_t size_bytes() const { return size_bytes_; }
  uint8_t* bytes() const { return static_cast<uint8_t*>(data_.get()); }
  template <typename T>
  T* data() const {
    return view().data<T>();
  }

 private:
  struct FreeDeleter {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, FreeDeleter> data_;
  DType dtype_ = DType::kF32;
  Shape shape_;
  uint64_t size_bytes_ = 0;
};

}  // namespace deepinfer::tensor

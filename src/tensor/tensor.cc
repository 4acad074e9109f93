#include "tensor/tensor.h"

#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>

namespace deepinfer::tensor {

Shape::Shape(std::initializer_list<int64_t> dims)
    : Shape(std::span<const int64_t>(dims.begin(), dims.size())) {}

Shape::Shape(std::span<const int64_t> dims) {
  CHECK_LE(dims.size(), static_cast<size_t>(kMaxRank)) << "rank too large";
  rank_ = static_cast<int>(dims.size());
  for (int i = 0; i < rank_; ++i) dims_[i] = dims[i];
}

int64_t Shape::NumElements() const {
  const int64_t n = CheckedNumElements(dims());
  CHECK_GE(n, 0) << "invalid shape " << ToString();
  return n;
}

std::string Shape::ToString() const {
  std::ostringstream out;
  out << "[";
  for (int i = 0; i < rank_; ++i) out << (i ? ", " : "") << dims_[i];
  out << "]";
  return out.str();
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.rank_ != b.rank_) return false;
  for (int i = 0; i < a.rank_; ++i) {
    if (a.dims_[i] != b.dims_[i]) return false;
  }
  return true;
}

int64_t CheckedNumElements(std::span<const int64_t> dims) {
  int64_t product = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    if (d != 0 && product > std::numeric_limits<int64_t>::max() / d) return -1;
    product *= d;
  }
  return product;
}

Shape ContiguousStrides(const Shape& shape) {
  Shape strides = shape;
  int64_t stride = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    strides[i] = stride;
    stride *= shape[i];
  }
  return strides;
}

TensorView::TensorView(void* data, DType dtype, Shape shape, Device device)
    : data_(data),
      dtype_(dtype),
      shape_(shape),
      strides_(ContiguousStrides(shape)),
      device_(device) {
  if (dtype == DType::kFP4E2M1 && shape.rank() > 0) {
    CHECK(shape[shape.rank() - 1] % 2 == 0) << "FP4 view needs an even innermost dim";
  }
}

TensorView::TensorView(void* data, DType dtype, Shape shape, Shape strides, Device device)
    : data_(data), dtype_(dtype), shape_(shape), strides_(strides), device_(device) {
  CHECK_EQ(shape.rank(), strides.rank());
  CHECK(dtype != DType::kFP4E2M1 || IsContiguous()) << "FP4 views must be contiguous";
}

bool TensorView::IsContiguous() const {
  int64_t expected = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

uint64_t TensorView::NumBytes() const {
  CHECK(IsContiguous()) << "NumBytes of a strided view " << ToString();
  const auto bytes = DTypeStorageBytes(dtype_, NumElements());
  CHECK(bytes.has_value());
  return *bytes;
}

bool TensorView::TypeMatches(DType requested) const {
  if (requested == dtype_) return true;
  if (requested == DType::kU8) {
    return dtype_ == DType::kF8E4M3 || dtype_ == DType::kF8E8M0 || dtype_ == DType::kFP4E2M1 ||
           dtype_ == DType::kI8 || dtype_ == DType::kF8E5M2 || dtype_ == DType::kBool;
  }
  if (requested == DType::kU16) return dtype_ == DType::kBF16 || dtype_ == DType::kF16;
  return false;
}

TensorView TensorView::Reshape(Shape shape) const {
  CHECK(IsContiguous()) << "Reshape of a strided view " << ToString();
  CHECK_EQ(shape.NumElements(), NumElements())
      << "Reshape " << shape_.ToString() << " -> " << shape.ToString();
  return TensorView(data_, dtype_, shape, device_);
}

TensorView TensorView::Slice0(int64_t begin, int64_t end) const {
  CHECK_GE(rank(), 1);
  CHECK(0 <= begin && begin <= end && end <= shape_[0])
      << "Slice0 [" << begin << ", " << end << ") of " << ToString();
  Shape shape = shape_;
  shape[0] = end - begin;
  // Byte offset of row `begin`: stride in elements times element bits.
  const uint64_t offset_bits =
      static_cast<uint64_t>(begin) * static_cast<uint64_t>(strides_[0]) * DTypeBits(dtype_);
  CHECK_EQ(offset_bits % 8, 0u);
  void* data = static_cast<uint8_t*>(data_) + offset_bits / 8;
  return TensorView(data, dtype_, shape, strides_, device_);
}

std::string TensorView::ToString() const {
  std::ostringstream out;
  out << DTypeName(dtype_) << shape_.ToString()
      << (device_.is_host() ? " (host)" : " (cuda:" + std::to_string(device_.index) + ")");
  return out.str();
}

void HostBuffer::FreeDeleter::operator()(void* p) const { std::free(p); }

HostBuffer::HostBuffer(DType dtype, Shape shape) : dtype_(dtype), shape_(shape) {
  const auto bytes = DTypeStorageBytes(dtype, shape.NumElements());
  CHECK(bytes.has_value()) << "HostBuffer size overflow " << shape.ToString();
  size_bytes_ = *bytes;
  constexpr uint64_t kAlignment = 64;
  const uint64_t allocated = ((size_bytes_ + kAlignment - 1) / kAlignment) * kAlignment;
  void* p = std::aligned_alloc(kAlignment, allocated == 0 ? kAlignment : allocated);
  CHECK(p != nullptr) << "out of host memory allocating " << allocated << " bytes";
  std::memset(p, 0, allocated == 0 ? kAlignment : allocated);
  data_.reset(p);
}

HostBuffer HostBuffer::CopyOf(DType dtype, Shape shape, std::span<const uint8_t> bytes) {
  HostBuffer buffer(dtype, shape);
  CHECK_EQ(bytes.size(), buffer.size_bytes()) << "HostBuffer::CopyOf size mismatch";
  if (!bytes.empty()) std::memcpy(buffer.bytes(), bytes.data(), bytes.size());
  return buffer;
}

}  // namespace deepinfer::tensor

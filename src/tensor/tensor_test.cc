#include "tensor/tensor.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <vector>

namespace deepinfer::tensor {
namespace {

TEST(ShapeTest, BasicsAndStrides) {
  const Shape shape{2, 3, 4};
  EXPECT_EQ(shape.rank(), 3);
  EXPECT_EQ(shape.NumElements(), 24);
  EXPECT_EQ(shape.ToString(), "[2, 3, 4]");
  EXPECT_EQ(ContiguousStrides(shape), (Shape{12, 4, 1}));
  EXPECT_EQ(Shape().NumElements(), 1);
  EXPECT_EQ(Shape().ToString(), "[]");
  EXPECT_EQ((Shape{5, 0}).NumElements(), 0);
  EXPECT_NE((Shape{2, 3}), (Shape{3, 2}));
  EXPECT_NE((Shape{2, 3}), (Shape{2, 3, 1}));
  EXPECT_EQ(shape.ToVector(), (std::vector<int64_t>{2, 3, 4}));
}

TEST(ShapeTest, CheckedNumElementsRejectsOverflowAndNegatives) {
  const std::vector<int64_t> huge{int64_t{1} << 40, int64_t{1} << 40};
  EXPECT_EQ(CheckedNumElements(huge), -1);
  const std::vector<int64_t> negative{3, -1};
  EXPECT_EQ(CheckedNumElements(negative), -1);
  const std::vector<int64_t> with_zero{0, std::numeric_limits<int64_t>::max()};
  EXPECT_EQ(CheckedNumElements(with_zero), 0);
}

TEST(TensorViewTest, ContiguousViewTypedAccess) {
  std::vector<float> data(6);
  for (int i = 0; i < 6; ++i) data[i] = static_cast<float>(i);
  const TensorView view(data.data(), DType::kF32, Shape{2, 3});
  EXPECT_TRUE(view.IsContiguous());
  EXPECT_EQ(view.NumElements(), 6);
  EXPECT_EQ(view.NumBytes(), 24u);
  EXPECT_EQ(view.data<float>()[4], 4.0f);
  EXPECT_EQ(view.ToString(), "f32[2, 3] (host)");
  EXPECT_EQ(view.device(), Device::Host());
  EXPECT_DEATH((void)view.data<int32_t>(), "TensorView::data<i32> on a f32 view");
}

TEST(TensorViewTest, RawByteAccessForPackedFormats) {
  std::vector<uint8_t> bytes(8);
  const TensorView fp8(bytes.data(), DType::kF8E4M3, Shape{2, 4});
  EXPECT_EQ(fp8.data<uint8_t>(), bytes.data());
  const TensorView fp4(bytes.data(), DType::kFP4E2M1, Shape{2, 8});
  EXPECT_EQ(fp4.NumBytes(), 8u);
  EXPECT_EQ(fp4.data<uint8_t>(), bytes.data());
  std::vector<uint16_t> halfs(4);
  const TensorView bf16(halfs.data(), DType::kBF16, Shape{4});
  EXPECT_EQ(bf16.data<uint16_t>(), halfs.data());
}

TEST(TensorViewTest, ReshapeAndSlice) {
  std::vector<int32_t> data(12);
  for (int i = 0; i < 12; ++i) data[i] = i;
  const TensorView view(data.data(), DType::kI32, Shape{3, 4});
  const TensorView flat = view.Reshape(Shape{12});
  EXPECT_EQ(flat.shape(), Shape{12});
  const TensorView rows = view.Slice0(1, 3);
  EXPECT_EQ(rows.shape(), (Shape{2, 4}));
  EXPECT_EQ(rows.data<int32_t>()[0], 4);
  EXPECT_TRUE(rows.IsContiguous());
  EXPECT_DEATH((void)view.Slice0(2, 4), "Slice0");
  EXPECT_DEATH((void)view.Reshape(Shape{5}), "Reshape");
}

TEST(TensorViewTest, Fp4SliceStepsHalfBytes) {
  std::vector<uint8_t> bytes(12);
  const TensorView fp4(bytes.data(), DType::kFP4E2M1, Shape{3, 8});  // 4 bytes per row
  EXPECT_EQ(fp4.Slice0(2, 3).data<uint8_t>(), bytes.data() + 8);
  EXPECT_DEATH(TensorView(bytes.data(), DType::kFP4E2M1, Shape{3, 7}), "even innermost");
}

TEST(TensorViewTest, StridedView) {
  std::vector<float> data(12);
  // Transposed view of a [3, 4] matrix.
  const TensorView t(data.data(), DType::kF32, Shape{4, 3}, Shape{1, 4}, Device::Host());
  EXPECT_FALSE(t.IsContiguous());
  EXPECT_DEATH((void)t.NumBytes(), "strided");
  const TensorView cuda(nullptr, DType::kBF16, Shape{2}, Device::Cuda(1));
  EXPECT_EQ(cuda.ToString(), "bf16[2] (cuda:1)");
}

TEST(HostBufferTest, ZeroedAlignedAndMovable) {
  HostBuffer buffer(DType::kBF16, Shape{3, 5});
  EXPECT_EQ(buffer.size_bytes(), 30u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.bytes()) % 64, 0u);
  for (uint64_t i = 0; i < buffer.size_bytes(); ++i) ASSERT_EQ(buffer.bytes()[i], 0);
  buffer.data<uint16_t>()[14] = 0x3F80;
  HostBuffer moved = std::move(buffer);
  EXPECT_EQ(moved.view().data<uint16_t>()[14], 0x3F80);
  EXPECT_EQ(moved.view().shape(), (Shape{3, 5}));
  HostBuffer fp4(DType::kFP4E2M1, Shape{3, 2});
  EXPECT_EQ(fp4.size_bytes(), 3u);
  HostBuffer empty(DType::kF32, Shape{0, 4});
  EXPECT_EQ(empty.size_bytes(), 0u);
}

TEST(HostBufferTest, CopyOf) {
  const std::vector<uint8_t> bytes{1, 2, 3, 4};
  const HostBuffer buffer = HostBuffer::CopyOf(DType::kU8, Shape{2, 2}, bytes);
  EXPECT_EQ(buffer.bytes()[3], 4);
  EXPECT_DEATH((void)HostBuffer::CopyOf(DType::kF32, Shape{2}, bytes), "size mismatch");
}

}  // namespace
}  // namespace deepinfer::tensor

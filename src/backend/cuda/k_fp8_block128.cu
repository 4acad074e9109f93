// The block-128 FP8 GEMM operands (kernels_block128.h): activation quantisation per token per
// 128 values, and the one-time re-blocking of an FP8 weight to 128 x 128 scales.
//
// Roofline: both are memory-bound streams. QuantizeFp8Block128 reads 4 bytes and writes 1 per
// value (+ one float per 128): a 4096 x 8192 prefill activation (134 MB read, 34 MB written) is
// ~37 us at 4.5 TB/s. RequantFp8Block128 reads and writes 1 byte per value, once per weight.
#include <cuda_fp8.h>

#include "backend/cuda/cuda_numerics.cuh"
#include "backend/cuda/kernels_block128.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;

__device__ __forceinline__ uint32_t E4m3Byte(float v) {
  return static_cast<uint32_t>(__nv_cvt_float_to_fp8(v, __NV_SATFINITE, __NV_E4M3));
}

// One warp per (K block kb, token t < padded_T), t fastest (coalesced scale stores); lane l
// quantises values 4l .. 4l + 3 of the block (one float4 load, one 4-byte store). Tokens from T
// on are zeros with scale 1.
__global__ void __launch_bounds__(kThreads)
    QuantizeBlock128Kernel(const float* x, int64_t T, int64_t padded_T, int64_t K, int64_t ldx,
                           uint8_t* q, float* scale, int64_t scale_ld) {
  pdl::WaitThenAllowNext();
  const int lane = threadIdx.x % 32;
  const int64_t n_blocks = padded_T * (K / kBlock128);
  const int64_t warps = int64_t{gridDim.x} * kWarps;
  for (int64_t b = int64_t{blockIdx.x} * kWarps + threadIdx.x / 32; b < n_blocks; b += warps) {
    const int64_t kb = b / padded_T, t = b % padded_T;
    const int64_t k = kb * kBlock128 + 4 * lane;
    if (t >= T) {
      *reinterpret_cast<uint32_t*>(q + t * K + k) = 0;
      if (lane == 0) scale[kb * scale_ld + t] = 1.0f;
      continue;
    }
    const float4 v4 = *reinterpret_cast<const float4*>(x + t * ldx + k);
    const float v[4] = {v4.x, v4.y, v4.z, v4.w};
    float s;
    const uint32_t packed = QuantizeWarpBlock128E4m3(v, &s);
    *reinterpret_cast<uint32_t*>(q + t * K + k) = packed;
    if (lane == 0) scale[kb * scale_ld + t] = s;
  }
}

__global__ void __launch_bounds__(kThreads)
    AddTailKernel(const float* part, int64_t ld_part, int64_t T, int64_t n, float* y, int64_t ldy,
                  bool accumulate) {
  pdl::WaitThenAllowNext();
  const int64_t total = T * n;
  for (int64_t i = int64_t{blockIdx.x} * kThreads + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * kThreads) {
    const int64_t t = i / n, c = i % n;
    const float v = part[t * ld_part + c];
    y[t * ldy + c] = accumulate ? y[t * ldy + c] + v : v;
  }
}

// One block per 128 x 128 weight block (blockIdx.x = K block, blockIdx.y = row block): the
// largest of its (up to) 16 ue8m0 sub-block scales is the block's scale; every byte is
// re-rounded to its value times 2^(own scale - block scale). Rows past the weight are not
// written (the copy's last row block may be partial).
__global__ void __launch_bounds__(kThreads)
    RequantBlock128Kernel(const uint8_t* data, const uint8_t* scale, int64_t rows, int64_t cols,
                          uint8_t* out, float* out_scale, int64_t scale_ld) {
  pdl::WaitThenAllowNext();
  const int64_t kb = blockIdx.x, rb = blockIdx.y;
  const int64_t scale_cols = cols / 32;
  const int64_t r0 = rb * kBlock128, r_end = r0 + kBlock128 < rows ? r0 + kBlock128 : rows;
  __shared__ int block_max;
  if (threadIdx.x == 0) block_max = 0;
  __syncthreads();
  if (threadIdx.x < 16) {
    const int64_t sr = r0 / 32 + threadIdx.x / 4;  // sub-block row of 32 rows
    if (sr * 32 < r_end) {
      atomicMax(&block_max, static_cast<int>(scale[sr * scale_cols + kb * 4 + threadIdx.x % 4]));
    }
  }
  __syncthreads();
  const int s_max = block_max;
  if (threadIdx.x == 0) out_scale[rb * scale_ld + kb] = ldexpf(1.0f, s_max - 127);
  // The last K block's block also zeroes the row's padding (scale_ld past cols / 128).
  if (kb == gridDim.x - 1 && threadIdx.x > 0 && kb + threadIdx.x < scale_ld) {
    out_scale[rb * scale_ld + kb + threadIdx.x] = 0.0f;
  }
  // Each thread handles 4 consecutive bytes of a row: 32 threads a row, 8 rows a pass.
  for (int64_t r = r0 + threadIdx.x / 32; r < r_end; r += kThreads / 32) {
    const int64_t c = kb * kBlock128 + 4 * (threadIdx.x % 32);
    const int shift = static_cast<int>(scale[(r / 32) * scale_cols + c / 32]) - s_max;  // <= 0
    const uint32_t in = *reinterpret_cast<const uint32_t*>(data + r * cols + c);
    uint32_t packed = in;
    if (shift != 0) {
      packed = 0;
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        __nv_fp8_e4m3 v;
        v.__x = static_cast<__nv_fp8_storage_t>((in >> (8 * i)) & 0xFFu);
        packed |= E4m3Byte(ldexpf(static_cast<float>(v), shift)) << (8 * i);
      }
    }
    *reinterpret_cast<uint32_t*>(out + r * cols + c) = packed;
  }
}

}  // namespace

int64_t Block128ActivationBytes(int64_t T, int64_t K) {
  return AlignUp16(T * K) + (K / kBlock128) * Block128ScaleLd(T) * int64_t{sizeof(float)};
}

cudaError_t QuantizeFp8Block128(const float* x, int64_t T, int64_t K, int64_t ldx, uint8_t* q,
                                float* scale, cudaStream_t stream, int64_t padded_T) {
  if (padded_T == 0) padded_T = T;
  if (T < 0 || padded_T < T || K % kBlock128 != 0 || ldx % 4 != 0) return cudaErrorInvalidValue;
  if (padded_T == 0 || K == 0) return cudaSuccess;
  const int64_t n_blocks = padded_T * (K / kBlock128);
  const int64_t grid = (n_blocks + kWarps - 1) / kWarps;
  pdl::Launch(QuantizeBlock128Kernel, static_cast<unsigned>(grid < 132 * 16 ? grid : 132 * 16),
              kThreads, 0, stream, x, T, padded_T, K, ldx, q, scale, Block128ScaleLd(padded_T));
  return cudaGetLastError();
}

cudaError_t AddBlock128Tail(const float* part, int64_t ld_part, int64_t T, int64_t n, float* y,
                            int64_t ldy, bool accumulate, cudaStream_t stream) {
  if (T <= 0 || n <= 0) return cudaSuccess;
  const int64_t grid = (T * n + kThreads - 1) / kThreads;
  pdl::Launch(AddTailKernel, static_cast<unsigned>(grid < 132 * 8 ? grid : 132 * 8), kThreads, 0,
              stream, part, ld_part, T, n, y, ldy, accumulate);
  return cudaGetLastError();
}

bool Block128Convertible(const DeviceWeight& w) {
  return w.format == model::WeightFormat::kFp8Block32 && w.cols > 0 && w.cols % kBlock128 == 0 &&
         w.rows > 0 && w.data != nullptr && w.scale != nullptr &&
         reinterpret_cast<uintptr_t>(w.data) % 4 == 0;
}

int64_t Block128WeightBytes(int64_t rows, int64_t cols) {
  const int64_t row_blocks = (rows + kBlock128 - 1) / kBlock128;
  return AlignUp16(rows * cols) +
         row_blocks * Block128ScaleLd(cols / kBlock128) * int64_t{sizeof(float)};
}

Block128Weight Block128WeightAt(const void* buffer, int64_t rows, int64_t cols) {
  Block128Weight w;
  w.data = static_cast<const uint8_t*>(buffer);
  w.scale = reinterpret_cast<const float*>(w.data + AlignUp16(rows * cols));
  w.scale_ld = Block128ScaleLd(cols / kBlock128);
  return w;
}

cudaError_t RequantFp8Block128(const DeviceWeight& w, void* buffer, cudaStream_t stream) {
  if (!Block128Convertible(w)) return cudaErrorInvalidValue;
  const Block128Weight view = Block128WeightAt(buffer, w.rows, w.cols);
  const dim3 grid(static_cast<unsigned>(w.cols / kBlock128),
                  static_cast<unsigned>((w.rows + kBlock128 - 1) / kBlock128));
  pdl::Launch(RequantBlock128Kernel, grid, kThreads, 0, stream, static_cast<const uint8_t*>(w.data),
              w.scale, w.rows, w.cols, const_cast<uint8_t*>(view.data),
              const_cast<float*>(view.scale), view.scale_ld);
  return cudaGetLastError();
}

}  // namespace deepinfer::backend::cuda::kernels

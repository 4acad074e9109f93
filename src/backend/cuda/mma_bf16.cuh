// PTX wrappers shared by the bf16 tensor-core kernels (k_mma.cu, k_attention_mma.cu,
// k_attention_prefill.cu, k_indexer_mma.cu, k_linear_stream.cu, stream_mma.cuh): shared-memory
// addresses, cp.async, streamed 16-byte global loads, ldmatrix, and mma.sync m16n8k16 bf16 with
// fp32 accumulation. Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels::mma {

__device__ __forceinline__ unsigned SharedAddress(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// 16 bytes global -> shared (cp.async, L1 bypassed), the commit of the issued copies, and
// the wait for all of them (the "memory" clobbers order them with the shared accesses).
__device__ __forceinline__ void CpAsync16(void* smem, const void* gmem) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(SharedAddress(smem)), "l"(gmem)
               : "memory");
}
__device__ __forceinline__ void CpAsyncCommit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void CpAsyncWaitAll() {
  asm volatile("cp.async.wait_group 0;\n" ::: "memory");
}
// Waits for this thread's copies of all but the `pending` most recent commit groups (pending
// 0 to 3; larger counts wait as for 3).
__device__ __forceinline__ void CpAsyncWaitAllBut(int64_t pending) {
  if (pending >= 3) {
    asm volatile("cp.async.wait_group 3;\n" ::: "memory");
  } else if (pending == 2) {
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
  } else if (pending == 1) {
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  } else {
    CpAsyncWaitAll();
  }
}

// 16 bytes read once from global memory (streamed weights): not kept in L1, and the L2 fetches
// the kPrefetch-byte block around them (256 or 128), so that a warp reading 64 bytes of a row per
// step has the row's next steps brought from HBM with them. kOrdered: asm volatile (the loads keep
// their program order; stream_mma.cuh issues its ring that way).
template <bool kOrdered = false, int kPrefetch = 256>
__device__ __forceinline__ uint4 LoadStreaming16(const void* p) {
  static_assert(kPrefetch == 256 || kPrefetch == 128, "an L2 prefetch size of PTX");
  uint4 r;
  if constexpr (kOrdered && kPrefetch == 256) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else if constexpr (kOrdered) {
    asm volatile("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
  } else if constexpr (kPrefetch == 256) {
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
  } else {
    asm("ld.global.nc.L1::no_allocate.L2::128B.v4.u32 {%0, %1, %2, %3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
  }
  return r;
}

// Four 8x8 b16 matrices; lane l gives the row address of matrix l / 8, row l % 8.
__device__ __forceinline__ void LdMatrixX4(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_addr))
               : "memory");
}

// The same, each matrix transposed.
__device__ __forceinline__ void LdMatrixX4Trans(uint32_t (&r)[4], const void* row_addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row_addr))
               : "memory");
}

// d += a (16x16 bf16, row) * b (16x8 bf16, col), fp32 accumulation.
__device__ __forceinline__ void MmaBf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                        uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// d = a * b (+ 0): the zero C is an immediate register, not 4 moves.
__device__ __forceinline__ void MmaBf16First(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
      "{%4, %5, %6, %7}, {%8, %9}, {%10, %10, %10, %10};"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "f"(0.0f));
}

}  // namespace deepinfer::backend::cuda::kernels::mma

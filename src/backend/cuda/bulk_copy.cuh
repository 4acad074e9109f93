// mbarrier and 1D bulk-copy (TMA engine) PTX for sm_90 kernels (k_moe_block128.cu,
// k_moe_block128_rs.cu, k_moe_block128_stream.cu). Barrier and shared-memory arguments are
// shared-state-space addresses (mma::SharedAddress). Include from .cu files only.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace deepinfer::backend::cuda::kernels::bulk {

__device__ __forceinline__ void BarrierInit(uint32_t bar, uint32_t arrivals) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(arrivals) : "memory");
}

// Makes the initialised barriers visible to the async proxy (the bulk copies).
__device__ __forceinline__ void FenceBarrierInit() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// One arrival on `bar` that also expects `bytes` more transaction bytes in this phase.
__device__ __forceinline__ void ArriveExpectTx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes)
               : "memory");
}

// One plain arrival on `bar`.
__device__ __forceinline__ void Arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

// `bytes` (a multiple of 16; both addresses 16-byte aligned) global -> shared by the TMA
// engine; completes `bytes` transaction bytes on `bar`.
__device__ __forceinline__ void BulkCopy(uint32_t dst, const void* src, uint32_t bytes,
                                         uint32_t bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// One arrival on `bar` once all of this thread's earlier cp.async (non-bulk) copies have
// landed; the barrier's expected count must include it (.noinc).
__device__ __forceinline__ void CpAsyncArriveNoinc(uint32_t bar) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];" ::"r"(bar) : "memory");
}

// One poll of `bar`: true when its phase with parity `parity` has completed (its bytes have
// landed and are visible to this thread). The "memory" clobber keeps the stage's reads after
// a successful poll.
__device__ __forceinline__ bool TryWaitPhase(uint32_t bar, uint32_t parity) {
  uint32_t done;
  asm volatile(
      "{\n\t.reg .pred p;\n\t"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
      "selp.u32 %0, 1, 0, p;\n\t}"
      : "=r"(done)
      : "r"(bar), "r"(parity)
      : "memory");
  return done != 0;
}

// Blocks until the phase of `bar` with parity `parity` has completed.
__device__ __forceinline__ void WaitPhase(uint32_t bar, uint32_t parity) {
  while (!TryWaitPhase(bar, parity)) {
  }
}

// WaitPhase for the tensor rings (written before they first ran on a GPU): a phase that has
// not completed after ~2^32 clock cycles (about 2 s; a fill takes microseconds) means a
// transaction count that never arrives (a box's bytes not what was armed, a rejected copy):
// trap (the launch fails with an error) rather than hang the process.
// The clock is read only once the first try has failed (no instructions for it on the path of
// a phase already complete).
__device__ __forceinline__ void WaitPhaseOrTrap(uint32_t bar, uint32_t parity) {
  if (TryWaitPhase(bar, parity)) return;
  const long long start = clock64();
  while (!TryWaitPhase(bar, parity)) {
    if (clock64() - start > (1ll << 32)) __trap();
  }
}

}  // namespace deepinfer::backend::cuda::kernels::bulk

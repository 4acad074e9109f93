// Programmatic dependent launch (PDL, sm_90) for the chains of small dependent kernels of a
// step (a decode step is ~280 of them).
//
// A kernel launched through pdl::Launch carries the launch attribute
// cudaLaunchAttributeProgrammaticStreamSerialization: the device may start it while its
// predecessor in the stream is still running, as soon as every block of the predecessor has
// executed griddepcontrol.launch_dependents (or exited). Its blocks then sit in
// griddepcontrol.wait, which returns once the predecessor grid has COMPLETED and its memory
// writes are visible. That hides the device-side launch gap (H200: ~0.8 us per kernel).
//
// Contract of every kernel launched through pdl::Launch (or with AppendAttribute):
//   WaitThenAllowNext() is its FIRST statement, before any global-memory read or write
//   (including reads of counts such as `*n_items` that decide an early return) and before
//   any early return. The one allowed exception: reads of memory that no kernel ever writes
//   may precede the wait, as long as every thread still waits before anything else: weights
//   (k_linear_stream.cu, k_linear_skinny.cu load theirs first) and the backend's pinned host
//   staging (kernels::UploadPinned; the host writes it before the launch and reuses it only
//   after a stream synchronisation).
// Why "wait, then allow": calling launch_dependents before wait lets the whole chain cascade
// onto the GPU (every kernel resident and spinning), which slowed long kernels by 20% on the
// H200. With wait first, at most two grids of the chain are resident: the running one and
// its successor waiting for it. The contract is also what keeps the chain correct
// transitively: a kernel completes only after its own wait returned, so when a kernel's wait
// returns, every earlier kernel of the stream has completed.
//
// A kernel that calls WaitThenAllowNext but is launched plainly (<<<>>>) is fine: without the
// attribute both instructions return at once. Host copies, memsets, events and cuBLAS calls
// between two kernels keep plain stream order.
//
// DEEPINFER_CUDA_PDL=0 in the environment (read once) launches without the attribute.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backend/cuda/launch_sink.h"

namespace deepinfer::backend::cuda::kernels::pdl {

// Blocks until the predecessor grid in the stream has completed and its writes are visible
// (returns at once when the kernel was launched without the PDL attribute).
__device__ __forceinline__ void WaitForPrevious() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the successor in the stream be scheduled (it still waits for this grid to complete
// before it touches memory).
__device__ __forceinline__ void AllowNext() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// The first statement of every kernel launched through pdl::Launch (see the file comment).
__device__ __forceinline__ void WaitThenAllowNext() {
  WaitForPrevious();
  AllowNext();
}

// Whether launches carry the PDL attribute: DEEPINFER_CUDA_PDL=0 turns it off (read once, at
// the first call), otherwise on. Defined in k_elementwise.cu.
bool Enabled();
// Overrides the environment for the rest of the process (tests compare PDL on and off).
void SetEnabled(bool on);

// Writes the PDL attribute at attrs[n] when PDL is enabled; returns the new attribute count
// (n or n + 1). `attrs` must have room for n + 1 entries. For launches that carry other
// attributes too (the cluster launches: cluster dimension and PDL may be combined).
inline unsigned AppendAttribute(cudaLaunchAttribute* attrs, unsigned n) {
  if (!Enabled()) return n;
  attrs[n] = cudaLaunchAttribute{};
  attrs[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attrs[n].val.programmaticStreamSerializationAllowed = 1;
  return n + 1;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute (when enabled), through
// launch::LaunchKernel (recorded when a StreamTape records the stream).
// Returns the launch status (what cudaGetLastError gives after <<<>>>).
template <typename... Params, typename... Args>
cudaError_t Launch(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                   cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attrs[1];
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = AppendAttribute(attrs, 0);
  return launch::LaunchKernel(config, kernel, std::forward<Args>(args)...);
}

}  // namespace deepinfer::backend::cuda::kernels::pdl

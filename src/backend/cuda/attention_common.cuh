// Pieces both sparse-attention kernels share (k_attention.cu on CUDA cores,
// k_attention_mma.cu on tensor cores): which rows a query token attends, and the launch
// with the candidate range split over a thread-block cluster. Include from .cu files only.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/cuda/kernels.h"
#include "model/backend.h"

namespace deepinfer::backend::cuda::kernels::attention {

// The rows one query token may attend: window rows [win0, win0 + win_len) and compressed
// rows comp0 + id for ids < comp_len (null varlen arrays: the whole buffers). Ranges
// outside the shared buffers (a caller bug) are flagged kErrSelectionOutOfRange (if
// `report`) and attend nothing there, so no read leaves the buffers.
struct TokenRows {
  int64_t p;  // query position
  int64_t win0, win_len, comp0, comp_len;

  __device__ TokenRows(const model::SparseAttentionArgs& a, int64_t t, bool report,
                       int* error_word) {
    p = a.q_pos[t];
    win0 = a.window_start != nullptr ? a.window_start[t] : 0;
    win_len = a.window_len != nullptr ? a.window_len[t] : a.n_window - win0;
    comp0 = a.comp_offset != nullptr ? a.comp_offset[t] : 0;
    comp_len = a.comp_len != nullptr ? a.comp_len[t] : a.n_comp - comp0;
    const bool bad_window = win0 < 0 || win_len < 0 || win0 + win_len > a.n_window;
    const bool bad_comp = comp0 < 0 || comp_len < 0 || comp0 + comp_len > a.n_comp;
    if (bad_window) win0 = 0, win_len = 0;
    if (bad_comp) comp0 = 0, comp_len = 0;
    if (report && (bad_window || bad_comp)) atomicOr(error_word, kErrSelectionOutOfRange);
  }

  __device__ int64_t candidates(int64_t n_select) const { return win_len + n_select; }
};

// The key/value row of candidate j of query token t, or null if it is not attended:
// j < win_len: window row win0 + j if its position is in (p - window, p];
// else: selection slot j - win_len (-1 = empty; ids >= comp_len flag an error if `report`).
__device__ __forceinline__ const float* CandidateRow(const model::SparseAttentionArgs& a, int64_t t,
                                                     const TokenRows& rows, int64_t j, bool report,
                                                     int* error_word) {
  if (j < rows.win_len) {
    const int64_t i = rows.win0 + j;
    const int64_t wp = a.window_pos[i];
    return (wp <= rows.p && wp > rows.p - a.window) ? a.window_kv + i * a.head_dim : nullptr;
  }
  const int32_t g = a.selection[t * a.n_select + (j - rows.win_len)];
  if (g < 0) return nullptr;
  if (g >= rows.comp_len) {
    if (report) atomicOr(error_word, kErrSelectionOutOfRange);
    return nullptr;
  }
  return a.comp_kv + (rows.comp0 + g) * a.head_dim;
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

// SMs of the current device (132, an H200, if it cannot be read).
inline int MultiprocessorCount() {
  static const int count = [] {
    int device = 0, n = 0;
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      cudaGetLastError();
      return 132;  // H200
    }
    return n;
  }();
  return count;
}

// Chunks of `chunk` candidates per token, for choosing the split. Varlen window lengths live
// on the device, so this assumes min(n_window, window) window rows (the kernel splits each
// token's real range).
inline int64_t CandidateChunks(const model::SparseAttentionArgs& args, int64_t chunk) {
  const int64_t window_rows = args.window_len == nullptr    ? args.n_window
                              : args.window < args.n_window ? args.window
                                                            : args.n_window;
  return (window_rows + args.n_select + chunk - 1) / chunk;
}

// Launches kernel(args, error_word) on a (tokens, groups, splits) grid, the `splits` blocks
// of a (token, group) forming one cluster. If such a cluster cannot be scheduled, the
// (non-sticky) launch error is cleared and each (token, group) runs in one block.
template <typename Kernel>
cudaError_t LaunchClusterSplit(Kernel kernel, const model::SparseAttentionArgs& args,
                               int* error_word, int64_t groups, int splits, int threads,
                               int64_t smem, cudaStream_t stream) {
  for (;;) {
    cudaLaunchConfig_t config = {};
    config.gridDim = dim3(static_cast<unsigned>(args.tokens), static_cast<unsigned>(groups),
                          static_cast<unsigned>(splits));
    config.blockDim = dim3(static_cast<unsigned>(threads));
    config.dynamicSmemBytes = static_cast<size_t>(smem);
    config.stream = stream;
    cudaLaunchAttribute cluster[1];
    cluster[0].id = cudaLaunchAttributeClusterDimension;
    cluster[0].val.clusterDim.x = 1;
    cluster[0].val.clusterDim.y = 1;
    cluster[0].val.clusterDim.z = static_cast<unsigned>(splits);
    config.attrs = cluster;
    config.numAttrs = splits > 1 ? 1 : 0;
    cudaError_t e = cudaLaunchKernelEx(&config, kernel, args, error_word);
    if (e == cudaSuccess) e = cudaGetLastError();
    if (e == cudaSuccess || splits == 1) return e;
    cudaGetLastError();
    splits = 1;
  }
}

}  // namespace deepinfer::backend::cuda::kernels::attention

// CudaBackend::CopyDeviceMany: one kernel launch for many small device copies (state-block
// gathers, window rows), instead of one cudaMemcpyAsync each.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels_copy.h"

namespace deepinfer::backend::cuda {

void CudaBackend::CopyDeviceMany(const model::DeviceCopy* copies, int64_t n_copies) {
  if (n_copies <= 0 || !Usable()) return;
  // One copy: a plain device copy, unless the tape records a small one (its addresses, e.g. a
  // window ring's slot, change every step; the kernel reads them from its uploaded
  // descriptor). A large one (prefill) is a copy node: the kernel has at most 64 blocks.
  constexpr int64_t kKernelCopyMaxBytes = int64_t{1} << 20;
  if (n_copies == 1 && (!Recording() || copies[0].bytes > kKernelCopyMaxBytes)) {
    return CopyDevice(copies[0].dst, copies[0].src, copies[0].bytes);
  }
  std::vector<kernels::CopyDesc> descs;
  descs.reserve(static_cast<size_t>(n_copies));
  // Every copy keeps its descriptor (empty ones with 0 bytes) and the launch width depends on
  // the largest copy rounded up to a power of two, so that a list of the same length and
  // similar sizes launches the same way every step (what lets a CUDA graph replay it).
  int64_t max_bytes = 1;
  for (int64_t i = 0; i < n_copies; ++i) {
    const model::DeviceCopy& c = copies[i];
    const int64_t bytes = c.bytes <= 0 || c.dst == c.src ? 0 : c.bytes;
    descs.push_back({c.dst, c.src, bytes});
    while (max_bytes < bytes) max_bytes *= 2;
  }
  for (size_t begin = 0; begin < descs.size(); begin += 65535) {
    const size_t n = std::min<size_t>(65535, descs.size() - begin);
    auto* dev = static_cast<kernels::CopyDesc*>(TempBytes(n * sizeof(kernels::CopyDesc)));
    if (dev == nullptr) break;
    if (!UploadAsync(dev, descs.data() + begin, n * sizeof(kernels::CopyDesc),
                     "CopyDeviceMany descriptors")) {
      break;
    }
    Check(kernels::CopyMany(dev, static_cast<int64_t>(n), max_bytes, stream_), "CopyDeviceMany");
  }
  Done("CopyDeviceMany");
}

void CudaBackend::GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k,
                                     const int64_t* bases, int64_t max_blocks, const int32_t* count,
                                     int64_t rows_per_block, int64_t d, float* out,
                                     int32_t* remapped) {
  if (T <= 0 || k <= 0 || !Usable()) return;
  Check(kernels::GatherSelectedRows(selection, T, k, bases, max_blocks, count, rows_per_block, d,
                                    out, remapped, stream_),
        "GatherSelectedRows");
  Done("GatherSelectedRows");
}

}  // namespace deepinfer::backend::cuda

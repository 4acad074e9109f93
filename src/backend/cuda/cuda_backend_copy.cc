// CudaBackend::CopyDeviceMany: one kernel launch for many small device copies (state-block
// gathers, window rows), instead of one cudaMemcpyAsync each.
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels_copy.h"

namespace deepinfer::backend::cuda {

void CudaBackend::CopyDeviceMany(const model::DeviceCopy* copies, int64_t n_copies) {
  if (n_copies <= 0 || !Usable()) return;
  if (n_copies == 1) return CopyDevice(copies[0].dst, copies[0].src, copies[0].bytes);
  std::vector<kernels::CopyDesc> descs;
  descs.reserve(static_cast<size_t>(n_copies));
  int64_t max_bytes = 0;
  for (int64_t i = 0; i < n_copies; ++i) {
    const model::DeviceCopy& c = copies[i];
    if (c.bytes <= 0 || c.dst == c.src) continue;
    descs.push_back({c.dst, c.src, c.bytes});
    max_bytes = std::max(max_bytes, c.bytes);
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

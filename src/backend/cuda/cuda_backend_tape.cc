// CudaBackend's side of CUDA graphs: ops record their stream work on a StreamTape (copies,
// memsets and every cuBLAS call through the helpers here; kernels through
// launch::LaunchKernel, which Usable() points at the tape), and FlushTape issues it.
#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace {

// After a synchronisation the segments ramp up from this many kernels, doubling, so the
// device starts on a step once the host recorded ~8 kernels (32-kernel segments from the
// step's start cost a B=1 step ~50 us on a slow host, H200 run 87): a B=1 decode step
// (~180 kernels) is 8 + 16 + 5 x 32.
constexpr int64_t kFirstSegmentKernels = 8;

}  // namespace

void CudaBackend::FlushTape() {
  if (tape_ == nullptr || tape_->empty()) return;
  Check(tape_->Flush(), "issuing recorded stream work (CUDA graph or launches)");
}

void CudaBackend::MaybeFlushSegment() {
  if (graph_segment_kernels_ <= 0 || !Recording()) return;
  const int64_t ramp = kFirstSegmentKernels << std::min<int64_t>(segments_since_sync_, 16);
  if (tape_->recorded_kernels() >= std::min(graph_segment_kernels_, ramp)) {
    FlushTape();
    ++segments_since_sync_;
  }
}

cudaStream_t CudaBackend::stream() {
  FlushTape();
  kernels::launch::SetRecordingStream(nullptr);
  return stream_;
}

void CudaBackend::set_graphs(bool on) {
  FlushTape();
  graphs_ = on;
  if (!on) kernels::launch::SetRecordingStream(nullptr);
}

bool CudaBackend::CopyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            const char* what) {
  if (Recording() && kind != cudaMemcpyDeviceToHost) {
    tape_->RecordCopy(dst, src, bytes, kind);
    return true;
  }
  FlushTape();
  return Check(cudaMemcpyAsync(dst, src, bytes, kind, stream_), what);
}

bool CudaBackend::Blas(const char* what, const uint64_t* key, size_t key_bytes,
                       std::function<cublasStatus_t()> gemm) {
  if (!Recording()) {
    FlushTape();
    return CheckBlas(gemm(), what);
  }
  // The key starts with the call site (`what`, a string literal): equal arguments of two
  // different GEMM calls are not the same work.
  std::vector<uint64_t> site_key(1 + key_bytes / sizeof(uint64_t));
  site_key[0] = reinterpret_cast<uint64_t>(what);
  std::memcpy(site_key.data() + 1, key, key_bytes);
  tape_->RecordCall(
      site_key.data(), site_key.size() * sizeof(uint64_t), [what, gemm = std::move(gemm)] {
        // An error, not a recorded failure: under stream capture the tape falls
        // back to issuing op by op, and only that failure is the backend's.
        const cublasStatus_t s = gemm();
        if (s == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
        LOG_ERROR("recorded cuBLAS call {} failed: {}", what, cublasGetStatusString(s));
        return cudaErrorUnknown;
      });
  return true;
}

bool CudaBackend::MemsetAsync(void* dst, int value, size_t bytes, const char* what) {
  if (Recording()) {
    tape_->RecordMemset(dst, value, bytes);
    return true;
  }
  FlushTape();
  return Check(cudaMemsetAsync(dst, value, bytes, stream_), what);
}

}  // namespace deepinfer::backend::cuda

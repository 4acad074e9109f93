// CudaBackend's side of CUDA graphs: ops record their stream work on a StreamTape (copies,
// memsets and cuBLAS calls through the helpers here; kernels through launch::LaunchKernel,
// which Usable() points at the tape), and FlushTape issues it.
#include <functional>
#include <utility>

#include "backend/cuda/cuda_backend.h"

namespace deepinfer::backend::cuda {

void CudaBackend::FlushTape() {
  if (tape_ == nullptr || tape_->empty()) return;
  Check(tape_->Flush(), "issuing recorded stream work (CUDA graph or launches)");
}

cudaStream_t CudaBackend::stream() {
  FlushTape();
  kernels::launch::SetCurrentSink(nullptr);
  return stream_;
}

void CudaBackend::set_graphs(bool on) {
  FlushTape();
  graphs_ = on;
  if (!on) kernels::launch::SetCurrentSink(nullptr);
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
  tape_->RecordCall(key, key_bytes, [this, what, gemm = std::move(gemm)] {
    CheckBlas(gemm(), what);  // a failure is recorded here, not reported twice by the flush
    return cudaSuccess;
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

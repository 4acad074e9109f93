// CudaBackend's side of CUDA graphs: ops record their stream work on a StreamTape (copies,
// memsets and every cuBLAS call through the helpers here; kernels through
// launch::LaunchKernel, which Usable() points at the tape), and FlushTape issues it.
#include <algorithm>
#include <cstring>
#include <functional>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/check.h"
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
  // A segment never ends inside a side lane: its tape could not become a graph.
  if (graph_segment_kernels_ <= 0 || !Recording() || tape_->fork_open()) return;
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
                       std::function<cublasStatus_t(cublasHandle_t)> gemm) {
  if (!Recording()) {
    FlushTape();
    return CheckBlas(gemm(cublas_), what);
  }
  // The key starts with the call site (`what`, a string literal): equal arguments of two
  // different GEMM calls are not the same work.
  std::vector<uint64_t> site_key(1 + key_bytes / sizeof(uint64_t));
  site_key[0] = reinterpret_cast<uint64_t>(what);
  std::memcpy(site_key.data() + 1, key, key_bytes);
  // The side lane's calls may run concurrently with the main lane's: their own handle and
  // workspace, pointed at the lane's stream when issued (cublasSetStream resets the
  // workspace, so it is set again).
  const bool side = tape_->lane() == 1;
  CHECK(!side || cublas_side_ != nullptr) << "side lane without its cuBLAS handle";
  cublasHandle_t handle = side ? cublas_side_ : cublas_;
  void* workspace = side ? cublas_side_workspace_ : nullptr;
  tape_->RecordCall(
      site_key.data(), site_key.size() * sizeof(uint64_t),
      [what, handle, workspace, gemm = std::move(gemm)](cudaStream_t stream) {
        cublasStatus_t s = CUBLAS_STATUS_SUCCESS;
        cudaStream_t current = nullptr;
        if (workspace != nullptr &&
            (s = cublasGetStream(handle, &current)) == CUBLAS_STATUS_SUCCESS && current != stream) {
          s = cublasSetStream(handle, stream);
          if (s == CUBLAS_STATUS_SUCCESS)
            s = cublasSetWorkspace(handle, workspace, kCublasWorkspaceBytes);
        }
        if (s == CUBLAS_STATUS_SUCCESS) s = gemm(handle);
        // An error, not a recorded failure: under stream capture the tape falls
        // back to issuing op by op, and only that failure is the backend's.
        if (s == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
        LOG_ERROR("recorded cuBLAS call {} failed: {}", what, cublasGetStatusString(s));
        return cudaErrorUnknown;
      });
  return true;
}

bool CudaBackend::EnsureSideBlas() {
  if (cublas_side_ != nullptr) return true;
  if (CreateBlasHandle(&cublas_side_, &cublas_side_workspace_)) return true;
  LOG_WARN("cuda backend: no cuBLAS handle for the side lane; side branches run in order");
  return false;
}

void CudaBackend::BeginSideBranch(int64_t rows) {
  CHECK(branch_ == Branch::kNone) << "BeginSideBranch: a side branch is already open";
  branch_ = Branch::kSide;
  if (rows <= side_branch_max_rows_ && Recording() && !failed_ && EnsureSideBlas()) {
    tape_->RecordFork();
  }
}

void CudaBackend::EndSideBranch() {
  CHECK(branch_ == Branch::kSide) << "EndSideBranch without BeginSideBranch";
  branch_ = Branch::kMain;
  // (A flush inside the branch issued everything so far in order and closed the lane.)
  if (tape_ != nullptr && tape_->fork_open() && tape_->lane() == 1) tape_->RecordToMain();
}

void CudaBackend::JoinSideBranch() {
  CHECK(branch_ == Branch::kMain) << "JoinSideBranch without EndSideBranch";
  branch_ = Branch::kNone;
  if (tape_ != nullptr && tape_->fork_open()) tape_->RecordJoin();
  std::vector<void*> released;
  released.swap(deferred_releases_);
  for (void* p : released) ReleaseDevice(p, "side branch join");
}

void CudaBackend::ReleaseDevice(void* p, const char* what) {
  // Held only while the tape holds an open side lane: otherwise every op runs in order on
  // stream_ (hints ignored, op by op, or a flush inside the branch issued it all in order).
  if (Recording() && tape_->fork_open()) {
    deferred_releases_.push_back(p);
    return;
  }
  Fail(arena_.Release(p).WithContext(what));
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

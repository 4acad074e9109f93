// CudaBackend: creation, error handling, memory, weights and the dense algebra.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <bit>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_copy.h"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/kernels_skinny.h"
#include "backend/cuda/kernels_stream.h"
#include "base/check.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace {

std::string CudaErrorText(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

// Rows of a weight tile dequantised at once: about 32 Mi floats (128 MiB) of scratch.
// Linear with at least this many token rows runs as two bf16 tensor-core GEMMs (x split into
// bf16 hi + mid + lo parts, weights exact in bf16) instead of fp32 SGEMM.
constexpr int64_t kBf16GemmMinTokens = 64;
constexpr size_t kPinnedBytes = size_t{16} << 20;     // staging buffer of UploadAsync
constexpr size_t kMaxPinnedUpload = size_t{1} << 20;  // larger uploads take the pageable path
// Kernels per recorded segment (set_graph_segment_kernels; the ramp: cuda_backend_tape.cc).
constexpr int64_t kGraphSegmentKernels = 32;

// A non-negative token count from the environment variable `name`, else `fallback` (a
// malformed value is logged and ignored).
int64_t TokensFromEnv(const char* name, int64_t fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (*end != '\0' || v < 0) {
    LOG_WARN("{}={} is not a token count; using {}", name, text, fallback);
    return fallback;
  }
  return static_cast<int64_t>(v);
}

// An on/off switch from the environment variable `name`: unset gives `fallback`, "0" off,
// any other value on.
bool SwitchFromEnv(const char* name, bool fallback) {
  const char* text = std::getenv(name);
  return text == nullptr ? fallback : std::strcmp(text, "0") != 0;
}

// A byte budget given in GiB by the environment (TokensFromEnv's parsing; at most 2^20 GiB, so
// the shift cannot overflow), or `fallback` bytes.
size_t BytesFromGibEnv(const char* name, size_t fallback) {
  const int64_t gib = std::min<int64_t>(TokensFromEnv(name, static_cast<int64_t>(fallback >> 30)),
                                        int64_t{1} << 20);
  return static_cast<size_t>(gib) << 30;
}

}  // namespace

int CudaBackend::DeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

base::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(int device) {
  const int count = DeviceCount();
  if (device < 0 || device >= count) {
    return base::FailedPreconditionError("CUDA device " + std::to_string(device) +
                                         " not present (" + std::to_string(count) + " devices)");
  }
  std::unique_ptr<CudaBackend> backend(new CudaBackend(device));
  DI_RETURN_IF_ERROR(backend->Init());
  return backend;
}

base::Status CudaBackend::Init() {
  auto fail = [](const std::string& what, cudaError_t e) {
    cudaGetLastError();
    return base::InternalError("CUDA init: " + what + ": " + CudaErrorText(e));
  };
  cudaError_t e = cudaSetDevice(device_);
  if (e != cudaSuccess) return fail("cudaSetDevice", e);
  cudaDeviceProp prop{};
  e = cudaGetDeviceProperties(&prop, device_);
  if (e != cudaSuccess) return fail("cudaGetDeviceProperties", e);
  if (prop.major != 9 || prop.minor != 0) {
    return base::FailedPreconditionError(std::string("CUDA device ") + prop.name +
                                         " is compute capability " + std::to_string(prop.major) +
                                         "." + std::to_string(prop.minor) +
                                         "; this build has sm_90a (Hopper) code only");
  }
  e = cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking);
  if (e != cudaSuccess) return fail("cudaStreamCreate", e);
  if (!CreateBlasHandle(&cublas_, &cublas_workspace_)) {
    return base::InternalError("CUDA init: cuBLAS handle setup failed (handle, modes or its " +
                               std::to_string(kCublasWorkspaceBytes >> 20) + " MiB workspace)");
  }
  if (cublasLtCreate(&cublas_lt_) != CUBLAS_STATUS_SUCCESS) {
    return base::InternalError("CUDA init: cublasLtCreate failed");
  }
  e = cudaMalloc(reinterpret_cast<void**>(&error_word_), sizeof(int));
  if (e == cudaSuccess) e = cudaMemsetAsync(error_word_, 0, sizeof(int), stream_);
  if (e == cudaSuccess) {
    e = cudaMalloc(reinterpret_cast<void**>(&hc_mix_counters_),
                   kernels::kHcMixCounters * sizeof(unsigned));
  }
  if (e == cudaSuccess) {
    e = cudaMemsetAsync(hc_mix_counters_, 0, kernels::kHcMixCounters * sizeof(unsigned), stream_);
  }
  if (e == cudaSuccess) {
    e = cudaHostAlloc(reinterpret_cast<void**>(&error_host_), sizeof(int), cudaHostAllocDefault);
  }
  if (e == cudaSuccess) e = cudaStreamSynchronize(stream_);
  if (e != cudaSuccess) return fail("error word / HcMix counters", e);
  // Staging for small uploads; without it (allocation failed) uploads take the pageable path.
  if (cudaHostAlloc(reinterpret_cast<void**>(&pinned_), kPinnedBytes, cudaHostAllocDefault) ==
      cudaSuccess) {
    pinned_capacity_ = kPinnedBytes;
  } else {
    cudaGetLastError();
    pinned_ = nullptr;
  }
  tape_ = std::make_unique<StreamTape>(stream_);
  kernels::launch::RegisterSink(stream_, tape_.get());
  graphs_ = SwitchFromEnv("DEEPINFER_CUDA_GRAPHS", true);
  graph_segment_kernels_ = TokensFromEnv("DEEPINFER_CUDA_GRAPH_SEGMENT", kGraphSegmentKernels);
  tape_->set_debug(SwitchFromEnv("DEEPINFER_CUDA_GRAPH_DEBUG", false));
  arena_.set_before_trim([this] { FlushTape(); });
  weights_.set_before_free([this] { FlushTape(); });
  sync_each_op_ = SwitchFromEnv("DEEPINFER_CUDA_SYNC", false);
  gemv_max_tokens_ = SwitchFromEnv("DEEPINFER_CUDA_GEMV", true) ? kernels::kDefaultGemvTokens : 0;
  mma_max_tokens_ = SwitchFromEnv("DEEPINFER_CUDA_MMA", true) ? kernels::kMaxMmaTokens : 0;
  attention_mma_ = SwitchFromEnv("DEEPINFER_CUDA_ATTN_MMA", true);
  attention_prefill_min_tokens_ =
      TokensFromEnv("DEEPINFER_ATTN_PREFILL_MIN_TOKENS", kAttentionPrefillMinTokens);
  attention_wgmma_min_tokens_ =
      TokensFromEnv("DEEPINFER_ATTN_WGMMA_MIN_TOKENS", kAttentionWgmmaMinTokens);
  bf16_gemm_min_tokens_ = SwitchFromEnv("DEEPINFER_CUDA_BF16_GEMM", true)
                              ? kBf16GemmMinTokens
                              : std::numeric_limits<int64_t>::max();
  fused_experts_ = SwitchFromEnv("DEEPINFER_CUDA_FUSED_MOE", true);
  paged_indexer_ = SwitchFromEnv("DEEPINFER_CUDA_PAGED_INDEXER", true);
  paged_attention_ = SwitchFromEnv("DEEPINFER_CUDA_PAGED_ATTENTION", true);
  side_branch_max_rows_ = TokensFromEnv("DEEPINFER_CUDA_SIDE_BRANCH_MAX_ROWS", kSideBranchMaxRows);
  linear_many_ = SwitchFromEnv("DEEPINFER_CUDA_LINEAR_MANY", true);
  fp8_activations_ = SwitchFromEnv("DEEPINFER_CUDA_FP8_ACT", false);
  exact_indexer_sums_ = SwitchFromEnv("DEEPINFER_CUDA_EXACT_INDEXER", false);
  fp8_bf16_gemm_min_tokens_ =
      TokensFromEnv("DEEPINFER_FP8_BF16_GEMM_MIN_TOKENS", kFp8Bf16GemmMinTokens);
  linear_stream_max_tokens_ =
      TokensFromEnv("DEEPINFER_LINEAR_STREAM_MAX_TOKENS", kernels::kStreamMaxTokens);
  fp8_bf16_copy_min_tokens_ =
      TokensFromEnv("DEEPINFER_FP8_BF16_COPY_MIN_TOKENS", kFp8Bf16CopyMinTokens);
  fp8_bf16_copy_budget_ = BytesFromGibEnv("DEEPINFER_FP8_BF16_COPY_GIB", kFp8Bf16CopyBudget);
  experts_bf16_min_tokens_ =
      TokensFromEnv("DEEPINFER_EXPERTS_BF16_MIN_TOKENS", kExpertsBf16MinTokens);
  fp8_block128_min_tokens_ =
      TokensFromEnv("DEEPINFER_FP8_BLOCK128_MIN_TOKENS", kFp8Block128MinTokens);
  fp8_block128_copy_budget_ =
      BytesFromGibEnv("DEEPINFER_FP8_BLOCK128_COPY_GIB", kFp8Block128CopyBudget);
  experts_block128_copy_budget_ =
      BytesFromGibEnv("DEEPINFER_EXPERTS_FP8_COPY_GIB", kExpertsBlock128CopyBudget);
  experts_block128_ = SwitchFromEnv("DEEPINFER_EXPERTS_BLOCK128", true);
  upload_kernel_ = SwitchFromEnv("DEEPINFER_CUDA_UPLOAD_KERNEL", true);
  fp8_small_bf16_skinny_ = SwitchFromEnv("DEEPINFER_FP8_SMALL_BF16_SKINNY", true);
  experts_decode_e4m3_ = SwitchFromEnv("DEEPINFER_EXPERTS_DECODE_E4M3", true);
  if (SwitchFromEnv("DEEPINFER_BATCH_INVARIANT", false)) set_batch_invariant(true);
  LOG_INFO("cuda backend: device {} {} ({} SMs, {:.1f} GiB){}{}", device_, prop.name,
           prop.multiProcessorCount, prop.totalGlobalMem / double(1 << 30),
           sync_each_op_ ? ", synchronising after every op" : "",
           fp8_activations_ ? ", FP8 activations (fast mode)" : "");
  return base::Status::Ok();
}

CudaBackend::~CudaBackend() {
  cudaSetDevice(device_);
  FlushTape();
  // No launch on any thread reaches the tape after it is gone (launch_sink.h).
  if (tape_ != nullptr) kernels::launch::UnregisterSink(stream_);
  if (kernels::launch::RecordingStream() == stream_) kernels::launch::SetRecordingStream(nullptr);
  if (stream_) cudaStreamSynchronize(stream_);
  ReleaseTemps();
  FreeExpertTables();
  FreeTimingEvents();
  for (float* scratch : linear_scratch_) {
    if (scratch) arena_.Release(scratch).IgnoreError();
  }
  for (void* p : deferred_releases_) arena_.Release(p).IgnoreError();
  if (error_word_) cudaFree(error_word_);
  if (error_host_) cudaFreeHost(error_host_);
  if (hc_mix_counters_) cudaFree(hc_mix_counters_);
  if (pinned_) cudaFreeHost(pinned_);
  if (cublas_lt_) cublasLtDestroy(cublas_lt_);
  if (cublas_) cublasDestroy(cublas_);
  if (cublas_workspace_) cudaFree(cublas_workspace_);
  if (cublas_side_) cublasDestroy(cublas_side_);
  if (cublas_side_workspace_) cudaFree(cublas_side_workspace_);
  if (stream_) cudaStreamDestroy(stream_);
}

// --- errors -------------------------------------------------------------------------------

base::Status CudaBackend::status() const {
  std::lock_guard<std::mutex> lock(status_mu_);
  return status_;
}

void CudaBackend::Fail(const base::Status& status) {
  if (status.ok()) return;
  std::lock_guard<std::mutex> lock(status_mu_);
  if (!status_.ok()) return;
  status_ = status;
  failed_ = true;
  LOG_ERROR("cuda backend failed (later ops are skipped): {}", status.ToString());
}

bool CudaBackend::Check(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  cudaGetLastError();  // clear a non-sticky error so that it is not reported twice
  Fail(base::InternalError(std::string("CUDA ") + what + ": " + CudaErrorText(e)));
  return false;
}

bool CudaBackend::CheckBlas(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  Fail(base::InternalError(std::string("cuBLAS ") + what + ": " + cublasGetStatusName(s) + " (" +
                           cublasGetStatusString(s) + ")"));
  return false;
}

bool CudaBackend::Usable() {
  if (failed_) return false;
  if (!Check(cudaSetDevice(device_), "cudaSetDevice")) return false;
  kernels::launch::SetRecordingStream(Recording() ? stream_ : nullptr);
  if (timing_on_) TimingStart();
  return true;
}

void CudaBackend::Done(const char* what, std::string_view weight_name) {
  if (timing_on_) TimingEnd(what, weight_name);
  ReleaseTemps();
  MaybeFlushSegment();
  if (sync_each_op_ && !failed_) {
    Check(cudaStreamSynchronize(stream_), what);
  }
}

base::Status CudaBackend::Synchronize() {
  if (!failed_) cudaSetDevice(device_);
  FlushTape();
  segments_since_sync_ = 0;
  // The error word comes back with the same stream synchronisation (one per call).
  const bool read_word = !failed_ && Check(cudaMemcpyAsync(error_host_, error_word_, sizeof(int),
                                                           cudaMemcpyDeviceToHost, stream_),
                                           "read error word");
  if (stream_ && Check(cudaStreamSynchronize(stream_), "stream synchronize")) ReclaimPinned();
  if (read_word && !failed_) {
    const int word = *error_host_;
    if (word != 0) {
      Check(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_), "clear error word");
      if (word & kernels::kErrSelectionOutOfRange) {
        Fail(base::InvalidArgumentError(
            "SparseAttention: a selected compressed entry id was >= n_comp (or its sequence's "
            "comp_len), or a varlen row range left the shared buffers"));
      }
      if (word & kernels::kErrAttnKvNotBf16) {
        Fail(base::InternalError(
            "SparseAttention (tensor cores): a key/value row was not exactly representable in "
            "bf16 (it should carry fake-quantised values); it was rounded"));
      }
      if (word & kernels::kErrExpertOutOfRange) {
        Fail(base::InvalidArgumentError("RoutedExperts: an expert id was outside [0, n_experts)"));
      }
    }
  }
  return status();
}

base::Status CudaBackend::UploadWeight(const model::WeightRef& w) {
  if (!Usable()) return status();
  return weights_.Get(w).status();
}

// --- memory -------------------------------------------------------------------------------

void* CudaBackend::TempBytes(size_t bytes) {
  base::StatusOr<void*> p = arena_.Allocate(bytes);
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  temps_.push_back(*p);
  return *p;
}

void CudaBackend::ReleaseTemps() {
  for (void* p : temps_) ReleaseDevice(p, "op temporaries");
  temps_.clear();
}

void CudaBackend::set_batch_invariant(bool on) {
  batch_invariant_ = on;
  gemv_max_tokens_ = on ? 0 : kernels::kDefaultGemvTokens;
}

float* CudaBackend::LinearScratch(int64_t floats) {
  const int lane = Lane();  // the lanes of a replayed graph may run at once
  if (floats <= linear_scratch_floats_[lane]) return linear_scratch_[lane];
  if (linear_scratch_[lane]) ReleaseDevice(linear_scratch_[lane], "LinearScratch");
  linear_scratch_[lane] = nullptr;
  linear_scratch_floats_[lane] = 0;
  base::StatusOr<void*> p = arena_.Allocate(static_cast<size_t>(floats) * sizeof(float));
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  linear_scratch_[lane] = static_cast<float*>(*p);
  linear_scratch_floats_[lane] = floats;
  return linear_scratch_[lane];
}

float* CudaBackend::AllocFloats(int64_t n) {
  float* p = AllocUninitialized(n);
  if (p != nullptr) {
    MemsetAsync(p, 0, static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float),
                "AllocFloats zero");
  }
  return p;
}

float* CudaBackend::AllocUninitialized(int64_t n) {
  if (!Usable()) return nullptr;
  const size_t bytes = static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float);
  base::StatusOr<void*> p = arena_.Allocate(bytes);
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  return static_cast<float*>(*p);
}

int32_t* CudaBackend::AllocInts(int64_t n) { return reinterpret_cast<int32_t*>(AllocFloats(n)); }

void CudaBackend::Free(void* p) {
  if (p != nullptr) ReleaseDevice(p, "CudaBackend::Free");
}

void CudaBackend::CopyToDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || !Usable()) return;
  UploadAsync(dst, src, static_cast<size_t>(bytes), "CopyToDevice");
  Done("CopyToDevice");
}

const float* CudaBackend::DeviceConstant(const float* host, int64_t n) {
  DeviceConstantEntry& e = constants_[host];
  const size_t bytes = static_cast<size_t>(n) * sizeof(float);
  if (e.device != nullptr && e.host.size() == static_cast<size_t>(n) &&
      std::memcmp(e.host.data(), host, bytes) == 0) {
    return e.device;
  }
  // Stream order makes the release safe: kernels enqueued earlier still read the old block
  // before any later user of it (inside a side lane ReleaseDevice holds it until the join).
  if (e.device != nullptr) ReleaseDevice(e.device, "device constant");
  e.device = nullptr;
  base::StatusOr<void*> p = arena_.Allocate(std::max<size_t>(bytes, 1));
  if (!p.ok()) {
    Fail(p.status());
    return nullptr;
  }
  e.device = static_cast<float*>(*p);
  e.host.assign(host, host + n);
  return UploadAsync(e.device, e.host.data(), bytes, "device constant") ? e.device : nullptr;
}

bool CudaBackend::UploadAsync(void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return true;
  if (pinned_ != nullptr && bytes <= kMaxPinnedUpload) {
    const size_t at = (pinned_used_ + 15) / 16 * 16;
    if (at + bytes > pinned_capacity_) {  // full: wait for the readers of what is staged
      FlushTape();
      if (!Check(cudaStreamSynchronize(stream_), what)) return false;
      ReclaimPinned();
      return UploadAsync(dst, src, bytes, what);
    }
    std::memcpy(pinned_ + at, src, bytes);
    pinned_used_ = at + bytes;
    if (upload_kernel_ && bytes <= static_cast<size_t>(kernels::kMaxUploadKernelBytes)) {
      return Check(kernels::UploadPinned(dst, pinned_ + at, static_cast<int64_t>(bytes), stream_),
                   what);
    }
    return CopyAsync(dst, pinned_ + at, bytes, cudaMemcpyHostToDevice, what);
  }
  // Pageable path: the driver stages the bytes before cudaMemcpyAsync returns. A pinned
  // source would be read later by the DMA engine, so then wait for it.
  FlushTape();
  if (!Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_), what)) return false;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, src) != cudaSuccess) {
    cudaGetLastError();
  } else if (attributes.type == cudaMemoryTypeHost) {
    return Check(cudaStreamSynchronize(stream_), what);
  }
  return true;
}

float* CudaBackend::AllocHostFloats(int64_t n) {
  if (n <= 0) return nullptr;
  void* p = nullptr;
  if (cudaHostAlloc(&p, static_cast<size_t>(n) * sizeof(float), cudaHostAllocDefault) !=
      cudaSuccess) {
    cudaGetLastError();  // not sticky: the caller falls back to pageable memory
    return nullptr;
  }
  return static_cast<float*>(p);
}

void CudaBackend::FreeHostFloats(float* p) {
  if (p != nullptr) cudaFreeHost(p);
}

void CudaBackend::CopyToHost(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0) return;
  bool ok = Usable() &&
            CopyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, "CopyToHost") &&
            Synchronize().ok();
  if (!ok) std::memset(dst, 0xFF, static_cast<size_t>(bytes));  // NaN, never plausible
}

void CudaBackend::CopyDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes <= 0 || !Usable() || dst == src) return;
  const char* d = static_cast<const char*>(dst);
  const char* s = static_cast<const char*>(src);
  const bool overlap = d < s + bytes && s < d + bytes;
  if (!overlap) {
    CopyAsync(dst, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, "CopyDevice");
  } else {  // memmove semantics through a temporary
    void* tmp = TempBytes(static_cast<size_t>(bytes));
    if (tmp &&
        CopyAsync(tmp, src, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, "CopyDevice")) {
      CopyAsync(dst, tmp, static_cast<size_t>(bytes), cudaMemcpyDeviceToDevice, "CopyDevice");
    }
  }
  Done("CopyDevice");
}

void CudaBackend::Fill(float* x, int64_t n, float value) {
  if (n <= 0 || !Usable()) return;
  Check(kernels::Fill(x, n, value, stream_), "Fill");
  Done("Fill");
}

void CudaBackend::Add(const float* a, const float* b, int64_t n, float* y) {
  if (n <= 0 || !Usable()) return;
  Check(kernels::Add(a, b, n, y, stream_), "Add");
  Done("Add");
}

void CudaBackend::Scale(float* x, int64_t n, float s) {
  if (n <= 0 || !Usable()) return;
  Check(kernels::Scale(x, n, s, stream_), "Scale");
  Done("Scale");
}

// --- weights ------------------------------------------------------------------------------

void CudaBackend::Linear(const float* x, int64_t T, int64_t ldx, const model::WeightRef& w,
                         int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate) {
  CHECK(w.valid()) << "missing weight " << w.name;
  CHECK(row0 >= 0 && row0 + n_rows <= w.rows) << w.name << ": rows " << row0 << "+" << n_rows;
  if (T == 0 || n_rows == 0 || !Usable()) return;
  base::StatusOr<kernels::DeviceWeight> dw = weights_.Get(w);
  if (!dw.ok()) return Fail(dw.status());
  const int64_t K = w.cols;
  const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
  // Column-major view: y^T [n, T] (ld ldy) = W_rows [K, n]^T (ld K) * x^T [K, T] (ld ldx).
  auto gemm = [&](const float* w_rows, int64_t n, float* y_cols) {
    const int m = static_cast<int>(n), cols = static_cast<int>(T), k = static_cast<int>(K);
    const int ld_x = static_cast<int>(ldx), ld_y = static_cast<int>(ldy);
    const uint64_t key[] = {uint64_t(m),
                            uint64_t(cols),
                            uint64_t(k),
                            uint64_t(ld_x),
                            uint64_t(ld_y),
                            reinterpret_cast<uint64_t>(w_rows),
                            reinterpret_cast<uint64_t>(x),
                            reinterpret_cast<uint64_t>(y_cols),
                            std::bit_cast<uint32_t>(beta)};
    return Blas("Linear sgemm", key, sizeof(key), [=](cublasHandle_t handle) {
      return cublasSgemm(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &alpha, w_rows, k, x, ld_x,
                         &beta, y_cols, ld_y);
    });
  };
  if (fp8_activations_ && kernels::Fp8LinearApplicable(*dw)) {
    const bool stream = Fp8UsesStream(T) && kernels::LinearStreamApplicable(*dw, row0, n_rows, T);
    if (!stream && Fp8UsesBlock128(T) &&
        LinearFp8Block128(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate)) {
      return Done("Linear", w.name);
    }
    const uint16_t* copy = stream ? nullptr : Fp8Bf16CopyFor(*dw, T);
    if (Fp8UsesBf16Gemm(T) || copy != nullptr) {
      LinearFp8Bf16(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate, copy);
    } else if (stream) {
      LinearFp8Stream(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate);
    } else {
      LinearFp8(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate);
    }
    return Done("Linear", w.name);
  }
  // FP8-activation mode, one row of a large BF16 weight (the head): cuBLAS streams it faster
  // than the GEMV (H200 run 67: head 301 us at 4.4 TB/s against 354 us), so such a row skips
  // the GEMV and takes the bf16 GEMM below, x rounded to bf16 as at every other T of this
  // mode. Small weights keep the GEMV (no cuBLAS launch gap).
  const bool fp8_row_on_cublas = fp8_activations_ && !batch_invariant_ && T == 1 &&
                                 dw->format == model::WeightFormat::kBF16 &&
                                 n_rows * K >= kFp8CublasRowMinElements;
  // FP8-activation mode: a small BF16 weight at 2..32 rows (set_fp8_small_bf16_skinny).
  if (fp8_activations_ && !batch_invariant_ && fp8_small_bf16_skinny_ && T >= 2 &&
      n_rows * K < kFp8CublasRowMinElements && kernels::SkinnyBf16Applicable(*dw, T) &&
      kernels::Aligned16(x) && ldx % 4 == 0) {
    const cudaError_t e =
        kernels::LinearSkinnyBf16(*dw, row0, n_rows, x, T, ldx, y, ldy, accumulate, stream_);
    if (e != cudaErrorNotSupported) {  // else no cluster of 8 fits here: cuBLAS below
      Check(e, "Linear skinny bf16");
      return Done("Linear", w.name);
    }
  }
  // One row: the GEMV (fastest there). More rows, up to 64: the tensor-core skinny GEMM.
  if (!fp8_row_on_cublas && T <= gemv_max_tokens_ && kernels::GemvApplicable(*dw, T)) {
    Check(kernels::LinearGemv(*dw, row0, n_rows, x, T, ldx, y, ldy, accumulate, stream_),
          "Linear gemv");
    return Done("Linear", w.name);
  }
  // FP8-activation mode: a BF16 weight (the head, the router) past the GEMV's rows takes x
  // rounded to bf16, one cuBLAS GEMM (DeepSeek's bf16 GEMMs), instead of the exact 3-term
  // split (batch-invariant mode keeps its fixed-slice kernel).
  if (fp8_activations_ && !batch_invariant_ && dw->format == model::WeightFormat::kBF16) {
    LinearBf16Split(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate, /*terms=*/1);
    return Done("Linear", w.name);
  }
  if (batch_invariant_ && mma_max_tokens_ > 0 &&
      kernels::MmaLinearApplicable(*dw, std::min(T, kernels::kMaxMmaTokens))) {
    // Slices of at most 64 tokens: each token's result is that of the same kernel alone.
    for (int64_t t = 0; t < T; t += kernels::kMaxMmaTokens) {
      const int64_t n = std::min(kernels::kMaxMmaTokens, T - t);
      if (!Check(kernels::LinearMma(*dw, row0, n_rows, x + t * ldx, n, ldx, y + t * ldy, ldy,
                                    accumulate, stream_),
                 "Linear mma")) {
        break;
      }
    }
    return Done("Linear", w.name);
  }
  if (T <= mma_max_tokens_ && kernels::MmaLinearApplicable(*dw, T)) {
    Check(kernels::LinearMma(*dw, row0, n_rows, x, T, ldx, y, ldy, accumulate, stream_),
          "Linear mma");
    return Done("Linear", w.name);
  }
  if (dw->format == model::WeightFormat::kF32) {
    gemm(static_cast<const float*>(dw->data) + row0 * K, n_rows, y);
    return Done("Linear", w.name);
  }
  if (T >= bf16_gemm_min_tokens_) {
    LinearBf16Split(x, T, ldx, *dw, row0, n_rows, y, ldy, accumulate, /*terms=*/3);
    return Done("Linear", w.name);
  }
  const int64_t tile = std::min(TileRows(K), n_rows);
  float* scratch = LinearScratch(tile * K);
  if (scratch == nullptr) return;
  for (int64_t r = 0; r < n_rows; r += tile) {
    const int64_t n = std::min(tile, n_rows - r);
    if (!Check(kernels::DequantRows(*dw, row0 + r, n, scratch, stream_), "Linear dequant") ||
        !gemm(scratch, n, y + r)) {
      break;
    }
  }
  Done("Linear", w.name);
}

bool CudaBackend::CreateBlasHandle(cublasHandle_t* handle, void** workspace) {
  cublasHandle_t h = nullptr;
  void* ws = nullptr;
  const bool ok = cublasCreate(&h) == CUBLAS_STATUS_SUCCESS &&
                  cublasSetStream(h, stream_) == CUBLAS_STATUS_SUCCESS &&
                  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH) == CUBLAS_STATUS_SUCCESS &&
                  cublasSetPointerMode(h, CUBLAS_POINTER_MODE_HOST) == CUBLAS_STATUS_SUCCESS &&
                  cudaMalloc(&ws, kCublasWorkspaceBytes) == cudaSuccess &&
                  cublasSetWorkspace(h, ws, kCublasWorkspaceBytes) == CUBLAS_STATUS_SUCCESS;
  if (!ok) {
    cudaGetLastError();
    if (h != nullptr) cublasDestroy(h);
    if (ws != nullptr) cudaFree(ws);
    return false;
  }
  *handle = h;
  *workspace = ws;
  return true;
}

int64_t CudaBackend::TileRows(int64_t cols) {
  const int64_t max_floats = int64_t{32} << 20;
  return std::max<int64_t>(32, (max_floats / std::max<int64_t>(cols, 1)) / 32 * 32);
}

void CudaBackend::GatherRows(const model::WeightRef& w, const int64_t* host_ids, int64_t n,
                             float* out) {
  CHECK(w.valid()) << "missing weight " << w.name;
  for (int64_t i = 0; i < n; ++i) {
    CHECK(host_ids[i] >= 0 && host_ids[i] < w.rows)
        << w.name << ": row id " << host_ids[i] << " out of range " << w.rows;
  }
  if (n <= 0 || !Usable()) return;
  base::StatusOr<kernels::DeviceWeight> dw = weights_.Get(w);
  if (!dw.ok()) return Fail(dw.status());
  const int64_t* ids = StageToDevice(host_ids, n);
  if (ids) Check(kernels::GatherWeightRows(*dw, ids, n, out, stream_), "GatherRows");
  Done("GatherRows", w.name);
}

}  // namespace deepinfer::backend::cuda

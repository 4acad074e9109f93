// CudaBackend: the block-128 FP8 path of the FP8-activation mode for many tokens
// (set_fp8_block128_min_tokens; numerics in kernels_block128.h): activations quantised per
// token per 128 values, the weight's re-blocked copy (made once, kept with the weight), one
// cuBLASLt block-scaled FP8 GEMM (VEC128 activations x BLK128x128 weights, fp32 output).
//
// Measured on the H200 (gpu_fp8_block_gemm, run 139; 4096 tokens): at a V4.1 layer's dense
// shapes this GEMM runs at 727-1,382 TFLOP/s against 523-837 for the bf16 cuBLAS GEMM it
// replaces (wo_b 249 against 411 us, wq_b 341 against 489 us).
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels_block128.h"
#include "base/check.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace {

using kernels::Aligned16;

// The matmul description of a block-128 GEMM (fills *desc and the three layouts).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;

  LtPlan(int64_t rows, int64_t T, int64_t K, int64_t ld_xq, int64_t ldy, const float* ws,
         const float* xs) {
    const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
    const int32_t mode_a = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    Try(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    Set(CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a));
    Set(CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b));
    Set(CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a, sizeof(mode_a));
    Set(CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b, sizeof(mode_b));
    Set(CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &ws, sizeof(ws));
    Set(CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &xs, sizeof(xs));
    Try(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, static_cast<uint64_t>(K),
                                   static_cast<uint64_t>(rows), K));
    Try(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, static_cast<uint64_t>(K),
                                   static_cast<uint64_t>(T), ld_xq));
    Try(cublasLtMatrixLayoutCreate(&d, CUDA_R_32F, static_cast<uint64_t>(rows),
                                   static_cast<uint64_t>(T), ldy));
  }
  ~LtPlan() {
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (desc) cublasLtMatmulDescDestroy(desc);
  }
  LtPlan(const LtPlan&) = delete;
  LtPlan& operator=(const LtPlan&) = delete;

 private:
  void Try(cublasStatus_t s) {
    if (status == CUBLAS_STATUS_SUCCESS) status = s;
  }
  void Set(cublasLtMatmulDescAttributes_t attr, const void* value, size_t bytes) {
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulDescSetAttribute(desc, attr, value, bytes);
    }
  }
};

}  // namespace

kernels::Block128Weight CudaBackend::Fp8Block128CopyFor(const kernels::DeviceWeight& w) {
  if (!kernels::Block128Convertible(w)) return {};
  const void* copy = weights_.DerivedCopy(
      w, WeightCache::CopyKind::kFp8Block128,
      static_cast<size_t>(kernels::Block128WeightBytes(w.rows, w.cols)), fp8_block128_copy_budget_,
      kFp8Bf16CopyKeepFree, [this](const kernels::DeviceWeight& view, void* out) {
        return kernels::RequantFp8Block128(view, out, stream_);
      });
  if (copy == nullptr) return {};
  return kernels::Block128WeightAt(copy, w.rows, w.cols);
}

std::optional<cublasLtMatmulAlgo_t> CudaBackend::Block128AlgoFor(const Block128Shape& s) {
  // (The heuristic does not depend on beta: accumulate is not part of the key.)
  const std::array<int64_t, 5> key = {s.rows, s.T, s.K, s.ld_xq, s.ldy};
  const auto found = block128_algos_.find(key);
  if (found != block128_algos_.end()) return found->second;
  if (block128_algos_.size() >= kMaxBlock128Algos) block128_algos_.clear();
  std::optional<cublasLtMatmulAlgo_t> algo;
  // The heuristic reads the scale modes, not the scale pointers: any non-null pointer will do
  // (it is never dereferenced).
  static constexpr float kAnyScale = 1.0f;
  const float* any_scale = &kAnyScale;
  LtPlan plan(s.rows, s.T, s.K, s.ld_xq, s.ldy, any_scale, any_scale);
  cublasLtMatmulPreference_t pref = nullptr;
  if (plan.status == CUBLAS_STATUS_SUCCESS &&
      cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS) {
    const size_t workspace = kCublasWorkspaceBytes;
    // Every operand is at least 16-byte aligned (RunBlock128Gemm's contract); the algorithm
    // must not assume more.
    const uint32_t align_bytes = 16;
    bool ok = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                   &workspace,
                                                   sizeof(workspace)) == CUBLAS_STATUS_SUCCESS;
    for (auto attr :
         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES}) {
      ok = ok && cublasLtMatmulPreferenceSetAttribute(pref, attr, &align_bytes,
                                                      sizeof(align_bytes)) == CUBLAS_STATUS_SUCCESS;
    }
    cublasLtMatmulHeuristicResult_t result;
    std::memset(&result, 0, sizeof(result));
    int count = 0;
    if (ok &&
        cublasLtMatmulAlgoGetHeuristic(cublas_lt_, plan.desc, plan.a, plan.b, plan.d, plan.d, pref,
                                       1, &result, &count) == CUBLAS_STATUS_SUCCESS &&
        count > 0) {
      algo = result.algo;
    }
    cublasLtMatmulPreferenceDestroy(pref);
  }
  if (!algo) {
    LOG_WARN(
        "cuda backend: no cuBLASLt block-128 FP8 algorithm for rows {} T {} K {} (ld {} / {})"
        "; such Linears keep the bf16 paths",
        s.rows, s.T, s.K, s.ld_xq, s.ldy);
  }
  block128_algos_.emplace(key, algo);
  return algo;
}

bool CudaBackend::Block128Fits(const Block128Shape& s, const float* y) {
  return (y == nullptr || Aligned16(y)) && s.ldy % 4 == 0 && s.ld_xq % 16 == 0 &&
         Block128AlgoFor(s).has_value();
}

bool CudaBackend::RunBlock128Gemm(const Block128Gemm& g) {
  const std::optional<cublasLtMatmulAlgo_t> algo = Block128AlgoFor(g.shape);
  CHECK(algo.has_value()) << "RunBlock128Gemm without Block128Fits";
  CHECK(Aligned16(g.w) && Aligned16(g.xq) && Aligned16(g.y))
      << "RunBlock128Gemm: operands not 16-byte aligned";
  // The side lane's calls may run beside the main lane's: each lane its own workspace.
  const bool side = Recording() && tape_->lane() == 1;
  void* workspace = side ? cublas_side_workspace_ : cublas_workspace_;
  CHECK(workspace != nullptr) << "block-128 GEMM without a cuBLAS workspace";
  cublasLtHandle_t lt = cublas_lt_;
  const cublasLtMatmulAlgo_t a = *algo;
  auto issue = [g, a, lt, workspace](cudaStream_t stream) -> cublasStatus_t {
    const Block128Shape& s = g.shape;
    LtPlan plan(s.rows, s.T, s.K, s.ld_xq, s.ldy, g.ws, g.xs);
    if (plan.status != CUBLAS_STATUS_SUCCESS) return plan.status;
    const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
    return cublasLtMatmul(lt, plan.desc, &alpha, g.w, plan.a, g.xq, plan.b, &beta, g.y, plan.d, g.y,
                          plan.d, &a, workspace, kCublasWorkspaceBytes, stream);
  };
  if (!Recording()) {
    FlushTape();
    return CheckBlas(issue(stream_), "Linear block-128 fp8 gemm");
  }
  const uint64_t key[] = {reinterpret_cast<uint64_t>("Linear block-128 fp8 gemm"),
                          reinterpret_cast<uint64_t>(g.w),
                          reinterpret_cast<uint64_t>(g.ws),
                          reinterpret_cast<uint64_t>(g.xq),
                          reinterpret_cast<uint64_t>(g.xs),
                          reinterpret_cast<uint64_t>(g.y),
                          uint64_t(g.shape.rows),
                          uint64_t(g.shape.T),
                          uint64_t(g.shape.K),
                          uint64_t(g.shape.ld_xq),
                          uint64_t(g.shape.ldy),
                          uint64_t(g.shape.accumulate),
                          reinterpret_cast<uint64_t>(workspace)};
  tape_->RecordCall(key, sizeof(key), [issue](cudaStream_t stream) {
    const cublasStatus_t s = issue(stream);
    if (s == CUBLAS_STATUS_SUCCESS) return cudaSuccess;
    // As Blas: under stream capture the tape falls back to op by op; only that failure counts.
    LOG_ERROR("recorded cuBLASLt block-128 GEMM failed: {}", cublasGetStatusString(s));
    return cudaErrorUnknown;
  });
  return true;
}

// The token split of a block-128 Linear: the first T - T % q tokens in one GEMM straight into
// y, the last T % q zero-padded to q (q = kBlock128TokenQuantum) in a GEMM into a scratch
// [q, groups * R] (ld tail_ld) that AddBlock128Tail adds into y.
struct CudaBackend::Block128Plan {
  int64_t K, R, groups;
  int64_t main, tail, tail_ld;
  Block128Shape main_shape, tail_shape;

  Block128Plan(int64_t T_, int64_t K_, int64_t R_, int64_t groups_, int64_t ldy, bool accumulate)
      : K(K_), R(R_), groups(groups_) {
    const int64_t q = kernels::kBlock128TokenQuantum;
    main = T_ / q * q;
    tail = T_ - main;
    tail_ld = kernels::Block128ScaleLd(groups * R);
    main_shape = {R, main, K, groups * K, ldy, accumulate};
    tail_shape = {R, q, K, groups * K, tail_ld, false};
  }
};

bool CudaBackend::Block128PlanFits(const Block128Plan& p, const float* x, int64_t ldx, float* y) {
  if (ldx % 4 != 0 || !Aligned16(x)) return false;
  for (int64_t g = 0; p.main > 0 && g < p.groups; ++g) {
    if (!Block128Fits(p.main_shape, y + g * p.R)) return false;
  }
  // The tail's scratch: an arena block (256-byte aligned), group g at g R (R % 128 == 0).
  return p.tail == 0 || Block128Fits(p.tail_shape, nullptr);
}

void CudaBackend::RunBlock128Plan(const Block128Plan& p, const float* x, int64_t ldx,
                                  const kernels::Block128Weight& w, int64_t row0, float* y,
                                  int64_t ldy) {
  const int64_t q = kernels::kBlock128TokenQuantum, KG = p.groups * p.K;
  const int64_t k_blocks = p.K / kernels::kBlock128;
  // One part: `n` tokens (padded to n_pad) from x into the GEMMs' outputs at out (ld ld_out).
  auto part = [&](const float* xp, int64_t n, int64_t n_pad, const Block128Shape& shape,
                  float* out) {
    auto* xq = static_cast<uint8_t*>(
        TempBytes(static_cast<size_t>(kernels::Block128ActivationBytes(n_pad, KG))));
    if (xq == nullptr) return false;
    float* xs = kernels::Block128ActivationScales(xq, n_pad, KG);
    if (!Check(kernels::QuantizeFp8Block128(xp, n, KG, ldx, xq, xs, stream_, n_pad),
               "Linear block-128 quantise")) {
      return false;
    }
    for (int64_t g = 0; g < p.groups; ++g) {
      const int64_t rows0 = row0 + g * p.R;
      const Block128Gemm gemm{
          w.data + rows0 * p.K, w.scale + (rows0 / kernels::kBlock128) * w.scale_ld,
          xq + g * p.K,         xs + g * k_blocks * kernels::Block128ScaleLd(n_pad),
          out + g * p.R,        shape};
      if (!RunBlock128Gemm(gemm)) return false;
    }
    return true;
  };
  if (p.main > 0 && !part(x, p.main, p.main, p.main_shape, y)) return;
  if (p.tail == 0) return;
  auto* scratch = static_cast<float*>(TempBytes(static_cast<size_t>(q * p.tail_ld) * 4));
  if (scratch == nullptr || !part(x + p.main * ldx, p.tail, q, p.tail_shape, scratch)) return;
  Check(kernels::AddBlock128Tail(scratch, p.tail_ld, p.tail, p.groups * p.R, y + p.main * ldy, ldy,
                                 p.main_shape.accumulate, stream_),
        "Linear block-128 tail");
}

bool CudaBackend::LinearFp8Block128(const float* x, int64_t T, int64_t ldx,
                                    const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows,
                                    float* y, int64_t ldy, bool accumulate) {
  const Block128Plan plan(T, w.cols, n_rows, 1, ldy, accumulate);
  if (!kernels::Block128Convertible(w) || row0 % kernels::kBlock128 != 0 ||
      !Block128PlanFits(plan, x, ldx, y)) {
    return false;
  }
  const kernels::Block128Weight copy = Fp8Block128CopyFor(w);
  if (copy.data == nullptr) return false;
  RunBlock128Plan(plan, x, ldx, copy, row0, y, ldy);
  return true;
}

bool CudaBackend::LinearGroupedFp8Block128(const float* x, int64_t T, int64_t ldx,
                                           const kernels::DeviceWeight& w, int64_t groups, float* y,
                                           int64_t ldy) {
  // Group g: rows [g R, g R + R) of w times columns [g K, g K + K) of x into columns
  // [g R, g R + R) of y.
  const int64_t R = w.rows / groups;
  const Block128Plan plan(T, w.cols, R, groups, ldy, false);
  if (!kernels::Block128Convertible(w) || R % kernels::kBlock128 != 0 ||
      !Block128PlanFits(plan, x, ldx, y)) {
    return false;
  }
  const kernels::Block128Weight copy = Fp8Block128CopyFor(w);
  if (copy.data == nullptr) return false;
  RunBlock128Plan(plan, x, ldx, copy, 0, y, ldy);
  return true;
}

}  // namespace deepinfer::backend::cuda

// gpu_fp8_block_gemm: cuBLASLt's block-scaled FP8 GEMM on Hopper at the V4.1 prefill shapes
// (issue 9, the prefill GEMM target), against the bf16 cuBLAS GEMM the FP8 mode used before
// (the backend's block-128 path: src/backend/cuda/kernels_block128.h).
//
//   gpu_fp8_block_gemm [--tokens 4096,16384] [--repeats N] [--check-only]
//
// 1. Layout check. D = (A .* sA)^T (B .* sB) with e4m3 operands and fp32 block scales in the
//    TN layout (A [K, M] column-major = weights [M rows, K] row-major; B [K, N] column-major =
//    activations [N tokens, K] row-major), B (activations) VEC128_32F, A (weights)
//    BLK128x128_32F or VEC128_32F, each scale layout hypothesis checked against an fp64 CPU
//    product. H200 (runs 140-142): VEC128 scales are [K / 128][N] (row or token index
//    fastest), BLK128x128 scales [M / 128][K / 128 rounded up to 4] (K block fastest);
//    relative errors ~3e-4 of the largest output (FP8 tensor-core sums within a block).
//    Then which token counts have an algorithm at all (run 143: multiples of 4 only; the
//    backend pads the rest).
// 2. Timing (CUDA events, 3 warm-up runs, median of --repeats): for each (out rows, K) of a V4.1
//    layer's dense Linears and each token count, the bf16 GEMM (cublasGemmEx, fp32 output: the
//    former FP8-mode prefill path) and the block-scaled FP8 GEMMs (fp32 output), TFLOP/s each.
// Any CUDA / cuBLAS error exits 1 naming the call; a layout that matches none exits 2.
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

constexpr char kProgram[] = "gpu_fp8_block_gemm";

#include "bench_cuda.cuh"  // NOLINT(build/include_order): uses kProgram

namespace {

using deepinfer::bench::Timer;

constexpr size_t kWorkspaceBytes = size_t{64} << 20;

enum class WeightScale { kBlk128x128, kVec128 };

const char* Name(WeightScale s) { return s == WeightScale::kBlk128x128 ? "blk128x128" : "vec128"; }

// One block-scaled FP8 GEMM plan: D [M, N] fp32 column-major = A^T B (+ beta D).
struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulHeuristicResult_t heuristic{};
  bool ok = false;
};

Plan MakePlan(cublasLtHandle_t lt, WeightScale ws, int64_t M, int64_t N, int64_t K, const float* sa,
              const float* sb) {
  Plan p;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
  const int32_t mode_a = ws == WeightScale::kBlk128x128
                             ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                             : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  const int32_t mode_b = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode_a,
                                              sizeof(mode_a)));
  CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode_b,
                                              sizeof(mode_b)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_8F_E4M3, K, M, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_8F_E4M3, K, N, K));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p.d, CUDA_R_32F, M, N, M));
  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t ws_bytes = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &ws_bytes, sizeof(ws_bytes)));
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(lt, p.op, p.a, p.b, p.d, p.d, pref, 1, &p.heuristic, &found);
  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  p.ok = st == CUBLAS_STATUS_SUCCESS && found > 0;
  if (!p.ok) {
    std::printf("  no algorithm: %s x vec128, M %lld N %lld K %lld (status %d, found %d)\n",
                Name(ws), static_cast<long long>(M), static_cast<long long>(N),
                static_cast<long long>(K), static_cast<int>(st), found);
  }
  return p;
}

void FreePlan(Plan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.d) cublasLtMatrixLayoutDestroy(p.d);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = Plan{};
}

void Run(cublasLtHandle_t lt, const Plan& p, const void* a, const void* b, float* d, void* work,
         float beta, cudaStream_t stream) {
  const float alpha = 1.0f;
  CUBLAS_CHECK(cublasLtMatmul(lt, p.op, &alpha, a, p.a, b, p.b, &beta, d, p.d, d, p.d,
                              &p.heuristic.algo, work, kWorkspaceBytes, stream));
}

// ---- 1. layout check ---------------------------------------------------------------------

float E4m3Value(uint8_t byte) {
  __nv_fp8_e4m3 v;
  v.__x = byte;
  return static_cast<float>(v);
}

// Random e4m3 bytes (finite, |v| <= 448) and power-of-two scales 2^-3 .. 2^3.
std::vector<uint8_t> RandomBytes(size_t n, std::mt19937& rng) {
  std::vector<uint8_t> out(n);
  for (auto& b : out) {
    do {
      b = static_cast<uint8_t>(rng());
    } while ((b & 0x7F) == 0x7F);
  }
  return out;
}
std::vector<float> RandomScales(size_t n, std::mt19937& rng) {
  std::vector<float> out(n);
  for (auto& s : out) s = std::ldexp(1.0f, static_cast<int>(rng() % 7) - 3);
  return out;
}

template <class T>
T* Upload(const std::vector<T>& host) {
  T* dev = nullptr;
  CUDA_CHECK(cudaMalloc(&dev, host.size() * sizeof(T)));
  CUDA_CHECK(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
  return dev;
}

// Max |D - ref| / max |ref| with the scale of weight (m, kb) and token (n, kb) looked up by the
// given functions.
template <class SaAt, class SbAt>
double RelError(const std::vector<float>& d, const std::vector<uint8_t>& a,
                const std::vector<uint8_t>& b, int64_t M, int64_t N, int64_t K, SaAt sa_at,
                SbAt sb_at) {
  double err = 0, ref_max = 0;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t m = 0; m < M; ++m) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        acc += static_cast<double>(E4m3Value(a[m * K + k])) * sa_at(m, k / 128) *
               E4m3Value(b[n * K + k]) * sb_at(n, k / 128);
      }
      err = std::max(err, std::fabs(acc - d[n * M + m]));
      ref_max = std::max(ref_max, std::fabs(acc));
    }
  }
  return err / std::max(ref_max, 1e-30);
}

bool CheckLayouts(cublasLtHandle_t lt, void* work, cudaStream_t stream, int64_t N) {
  const int64_t M = 384, K = 640, KB = K / 128;  // 3 row blocks x 5 K blocks: no symmetry
  const int64_t n_ld = (N + 3) / 4 * 4;          // token-fastest scales, ld padded to 4
  std::mt19937 rng(7);
  const std::vector<uint8_t> a = RandomBytes(M * K, rng), b = RandomBytes(N * K, rng);
  uint8_t* da = Upload(a);
  uint8_t* db = Upload(b);
  float* dd = nullptr;
  CUDA_CHECK(cudaMalloc(&dd, M * N * sizeof(float)));
  const std::vector<float> sb = RandomScales(n_ld * KB, rng);
  float* dsb = Upload(sb);
  bool all_ok = true;
  for (WeightScale ws : {WeightScale::kBlk128x128, WeightScale::kVec128}) {
    // Weight scales: one per (row block, K block), row block = 128 rows (BLK) or 1 row (VEC).
    // Stored with the row-block index fastest and a leading dimension padded to 4 (16 bytes).
    const int64_t div = ws == WeightScale::kBlk128x128 ? 128 : 1;
    const int64_t a_rows = M / div, a_ld = (a_rows + 3) / 4 * 4, kb_ld = (KB + 3) / 4 * 4;
    const std::vector<float> sa = RandomScales(std::max(a_ld * KB, a_rows * kb_ld), rng);
    float* dsa = Upload(sa);
    Plan p = MakePlan(lt, ws, M, N, K, dsa, dsb);
    if (!p.ok) {
      all_ok = false;
      CUDA_CHECK(cudaFree(dsa));
      continue;
    }
    Run(lt, p, da, db, dd, work, 0.0f, stream);
    CUDA_CHECK(cudaStreamSynchronize(stream));
    std::vector<float> d(M * N);
    CUDA_CHECK(cudaMemcpy(d.data(), dd, d.size() * sizeof(float), cudaMemcpyDeviceToHost));
    // Candidate scale lookups: A (the weights' block scales, m / div) and B (per token).
    auto sa_mfast_rows = [&](int64_t m, int64_t kb) { return sa[kb * a_rows + m / div]; };
    auto sa_mfast_pad = [&](int64_t m, int64_t kb) { return sa[kb * a_ld + m / div]; };
    auto sa_kfast = [&](int64_t m, int64_t kb) { return sa[(m / div) * KB + kb]; };
    auto sa_kfast_pad = [&](int64_t m, int64_t kb) { return sa[(m / div) * kb_ld + kb]; };
    auto sb_nfast = [&](int64_t n, int64_t kb) { return sb[kb * N + n]; };
    auto sb_nfast_pad = [&](int64_t n, int64_t kb) { return sb[kb * n_ld + n]; };
    auto sb_kfast = [&](int64_t n, int64_t kb) { return sb[n * KB + kb]; };
    auto err = [&](auto sa_at, auto sb_at) { return RelError(d, a, b, M, N, K, sa_at, sb_at); };
    struct Hyp {
      const char* name;
      double err;
    };
    const Hyp hyps[] = {
        {"A m-fast ld=rows/B n-fast", err(sa_mfast_rows, sb_nfast)},
        {"A m-fast ld=pad4/B n-fast", err(sa_mfast_pad, sb_nfast)},
        {"A k-fast ld=KB/B n-fast", err(sa_kfast, sb_nfast)},
        {"A k-fast ld=pad4/B n-fast", err(sa_kfast_pad, sb_nfast)},
        {"A k-fast ld=pad4/B n-fast ld=pad4", err(sa_kfast_pad, sb_nfast_pad)},
        {"A m-fast ld=rows/B n-fast ld=pad4", err(sa_mfast_rows, sb_nfast_pad)},
        {"A m-fast ld=rows/B k-fast", err(sa_mfast_rows, sb_kfast)},
    };
    double best = 1e30;
    std::printf("layout %s x vec128, N %lld:", Name(ws), static_cast<long long>(N));
    for (const Hyp& h : hyps) {
      std::printf("  [%s] %.2e", h.name, h.err);
      best = std::min(best, h.err);
    }
    std::printf("\n");
    if (best > 1e-3) all_ok = false;
    FreePlan(p);
    CUDA_CHECK(cudaFree(dsa));
  }
  for (void* ptr : {static_cast<void*>(da), static_cast<void*>(db), static_cast<void*>(dd),
                    static_cast<void*>(dsb)}) {
    CUDA_CHECK(cudaFree(ptr));
  }
  return all_ok;
}

// ---- 2. timing ---------------------------------------------------------------------------

struct Shape {
  const char* name;
  int64_t rows, K;
};

// A V4.1-Flash layer's dense Linears (model.md's tensor table; wo_a is one of its 8 groups).
constexpr Shape kShapes[] = {
    {"wq_a", 1280, 5120},        {"wq_b", 32768, 1280},        {"wkv", 512, 5120},
    {"wo_a(group)", 1024, 4096}, {"wo_b", 5120, 8192},         {"shared w1+w3", 4608, 5120},
    {"shared w2", 5120, 2304},   {"indexer wq_b", 4096, 1280}, {"engram wkv", 25600, 6144},
};

void TimeShapes(cublasLtHandle_t lt, cublasHandle_t blas, void* work, const Timer& timer,
                const std::vector<int64_t>& tokens) {
  std::printf("%-14s %6s %6s %6s | %9s %9s | %9s %9s | %9s %9s\n", "linear", "rows", "K", "T",
              "bf16 us", "TFLOP/s", "blk us", "TFLOP/s", "vec us", "TFLOP/s");
  for (int64_t T : tokens) {
    for (const Shape& s : kShapes) {
      const int64_t M = s.rows, K = s.K, N = T;
      void* a = nullptr;
      void* b = nullptr;
      float* d = nullptr;
      float *sa = nullptr, *sb = nullptr;
      CUDA_CHECK(cudaMalloc(&a, M * K * 2));
      CUDA_CHECK(cudaMalloc(&b, N * K * 2));
      CUDA_CHECK(cudaMalloc(&d, M * N * sizeof(float)));
      CUDA_CHECK(cudaMalloc(&sa, M * (K / 128) * sizeof(float)));
      CUDA_CHECK(cudaMalloc(&sb, N * (K / 128) * sizeof(float)));
      CUDA_CHECK(cudaMemset(a, 0x11, M * K * 2));  // small finite values in both formats
      CUDA_CHECK(cudaMemset(b, 0x12, N * K * 2));
      CUDA_CHECK(cudaMemset(sa, 0x3F, M * (K / 128) * sizeof(float)));  // 0.747 each
      CUDA_CHECK(cudaMemset(sb, 0x3F, N * (K / 128) * sizeof(float)));
      const double flop = 2.0 * M * N * K;
      const float one = 1.0f, zero = 0.0f;
      const double bf16_ms = timer.MedianMs([&] {
        CUBLAS_CHECK(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(M),
                                  static_cast<int>(N), static_cast<int>(K), &one, a, CUDA_R_16BF,
                                  static_cast<int>(K), b, CUDA_R_16BF, static_cast<int>(K), &zero,
                                  d, CUDA_R_32F, static_cast<int>(M), CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
      });
      double ms[2] = {0, 0};
      int i = 0;
      for (WeightScale ws : {WeightScale::kBlk128x128, WeightScale::kVec128}) {
        Plan p = MakePlan(lt, ws, M, N, K, sa, sb);
        if (p.ok) {
          ms[i] = timer.MedianMs([&] { Run(lt, p, a, b, d, work, 0.0f, timer.stream); });
        }
        FreePlan(p);
        ++i;
      }
      auto tf = [&](double t) { return t > 0 ? flop / (t * 1e-3) / 1e12 : 0.0; };
      std::printf("%-14s %6lld %6lld %6lld | %9.1f %9.1f | %9.1f %9.1f | %9.1f %9.1f\n", s.name,
                  static_cast<long long>(M), static_cast<long long>(K), static_cast<long long>(T),
                  bf16_ms * 1e3, tf(bf16_ms), ms[0] * 1e3, tf(ms[0]), ms[1] * 1e3, tf(ms[1]));
      for (void* ptr :
           {a, b, static_cast<void*>(d), static_cast<void*>(sa), static_cast<void*>(sb)}) {
        CUDA_CHECK(cudaFree(ptr));
      }
    }
  }
}

std::vector<int64_t> ParseList(const char* text) {
  std::vector<int64_t> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    out.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
    if (end == p && *end != '\0') break;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> tokens = {4096, 16384};
  int repeats = 20;
  bool check_only = false;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokens" && i + 1 < argc) {
      tokens = ParseList(argv[++i]);
    } else if (arg == "--repeats" && i + 1 < argc) {
      repeats = std::max(3, std::atoi(argv[++i]));
    } else if (arg == "--check-only") {
      check_only = true;
    } else {
      std::fprintf(stderr,
                   "usage: gpu_fp8_block_gemm [--tokens 4096,16384] [--repeats N] "
                   "[--check-only]\n");
      return 1;
    }
  }
  cublasLtHandle_t lt;
  cublasHandle_t blas;
  CUBLAS_CHECK(cublasLtCreate(&lt));
  CUBLAS_CHECK(cublasCreate(&blas));
  Timer timer{};
  timer.repeats = repeats;
  CUDA_CHECK(cudaStreamCreate(&timer.stream));
  CUBLAS_CHECK(cublasSetStream(blas, timer.stream));
  void* work = nullptr;
  CUDA_CHECK(cudaMalloc(&work, kWorkspaceBytes));
  bool layouts_ok = true;
  for (int64_t n : {256, 264}) layouts_ok = CheckLayouts(lt, work, timer.stream, n) && layouts_ok;
  std::printf("token counts with an algorithm (blk128x128 x vec128, M 384, K 640):");
  for (int64_t n : {1, 4, 8, 16, 33, 36, 40, 258, 260, 264}) {
    float* any = reinterpret_cast<float*>(work);
    Plan p = MakePlan(lt, WeightScale::kBlk128x128, 384, n, 640, any, any);
    std::printf(" %lld:%s", static_cast<long long>(n), p.ok ? "yes" : "no");
    FreePlan(p);
  }
  std::printf("\n");
  if (!check_only) TimeShapes(lt, blas, work, timer, tokens);
  CUDA_CHECK(cudaFree(work));
  cublasDestroy(blas);
  cublasLtDestroy(lt);
  return layouts_ok ? 0 : 2;
}

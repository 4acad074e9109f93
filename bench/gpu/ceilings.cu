// gpu_ceilings: the hardware ceilings the GPU benchmark is judged against (issue 9).
//
//   gpu_ceilings [--json PATH] [--repeats N]
//
// Measures on device 0 with CUDA events (3 warm-up runs, median of N >= 20 timed runs), on
// random data:
//   hbm_copy   device-to-device cudaMemcpyAsync of 4 GiB; GB/s = (read + written) / time
//   hbm_read   a read-only kernel (16-byte loads, XOR reduction) over 8 GiB; GB/s = read / time
//   bf16       cuBLASLt BF16 GEMM 8192^3, fp32 accumulate, bf16 output
//   fp8        cuBLASLt e4m3 x e4m3 GEMM 8192^3 (TN), fp32 compute, bf16 output, scales 1.0
//              (default accumulation; fp8_fast_accum_tflops: CUBLASLT_MATMUL_DESC_FAST_ACCUM)
//   fp8_by_m   the FP8 GEMM at M = 16 .. 4096 tokens, N = K = 5120
// Prints a table; --json writes {"hbm_copy_GBps", "hbm_read_GBps", "bf16_tflops",
// "fp8_tflops", "fp8_fast_accum_tflops", "fp8_by_m": {"16": tflops, ...}, "device", "sms",
// "clock" (MHz)}. Any CUDA / cuBLAS error exits 1 with a message naming the call.
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

constexpr char kProgram[] = "gpu_ceilings";

#include "bench_cuda.cuh"  // NOLINT(build/include_order): uses kProgram

namespace {

using deepinfer::bench::Timer;

constexpr size_t kGiB = size_t{1} << 30;
constexpr size_t kWorkspaceBytes = size_t{64} << 20;

// ---- random data ---------------------------------------------------------------------------

__device__ uint64_t Mix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Uniform in [-1, 1) from (seed, index).
__device__ float UnitUniform(uint64_t seed, size_t i) {
  const uint64_t r = Mix64(seed ^ (i * 0xD1B54A32D192ED03ULL));
  return static_cast<float>(r >> 40) * (2.0f / 16777216.0f) - 1.0f;
}

__global__ void FillU32(uint32_t* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = static_cast<uint32_t>(Mix64(seed ^ (i * 0xD1B54A32D192ED03ULL)));
  }
}

__global__ void FillBf16(__nv_bfloat16* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = __float2bfloat16(UnitUniform(seed, i));
  }
}

__global__ void FillFp8(__nv_fp8_e4m3* p, size_t n, uint64_t seed) {
  for (size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x; i < n;
       i += size_t{gridDim.x} * blockDim.x) {
    p[i] = __nv_fp8_e4m3(UnitUniform(seed, i));
  }
}

// ---- read kernel ---------------------------------------------------------------------------

// XOR of every word of p[0, n); one result per warp in out[global warp id], so that the
// loads cannot be optimised away. Four independent 16-byte loads per thread per iteration.
__global__ void ReadXor(const uint4* __restrict__ p, size_t n, uint32_t* __restrict__ out) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  size_t i = blockIdx.x * size_t{blockDim.x} + threadIdx.x;
  uint32_t acc = 0;
  for (; i + 3 * stride < n; i += 4 * stride) {
    const uint4 a = __ldg(p + i);
    const uint4 b = __ldg(p + i + stride);
    const uint4 c = __ldg(p + i + 2 * stride);
    const uint4 d = __ldg(p + i + 3 * stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w;
    acc ^= c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^ d.w;
  }
  for (; i < n; i += stride) {
    const uint4 a = __ldg(p + i);
    acc ^= a.x ^ a.y ^ a.z ^ a.w;
  }
  for (int offset = 16; offset > 0; offset >>= 1) acc ^= __shfl_xor_sync(0xFFFFFFFFu, acc, offset);
  if ((threadIdx.x & 31) == 0) out[(blockIdx.x * size_t{blockDim.x} + threadIdx.x) / 32] = acc;
}

// ---- timing --------------------------------------------------------------------------------

template <typename T>
T* DeviceAlloc(size_t count) {
  void* p = nullptr;
  CUDA_CHECK(cudaMalloc(&p, count * sizeof(T)));
  return static_cast<T*>(p);
}

constexpr int kFillBlocks = 4096;
constexpr int kFillThreads = 256;

double HbmCopyGBps(const Timer& timer) {
  const size_t bytes = 4 * kGiB;
  uint32_t* src = DeviceAlloc<uint32_t>(bytes / 4);
  uint32_t* dst = DeviceAlloc<uint32_t>(bytes / 4);
  FillU32<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(src, bytes / 4, 1);
  CUDA_CHECK(cudaGetLastError());
  const double ms = timer.MedianMs([&] {
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, timer.stream));
  });
  CUDA_CHECK(cudaFree(src));
  CUDA_CHECK(cudaFree(dst));
  return 2.0 * static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

double HbmReadGBps(const Timer& timer, int sms) {
  const size_t bytes = 8 * kGiB;
  uint4* data = DeviceAlloc<uint4>(bytes / sizeof(uint4));
  FillU32<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(reinterpret_cast<uint32_t*>(data),
                                                          bytes / 4, 2);
  CUDA_CHECK(cudaGetLastError());
  const int threads = 512;
  const int blocks = sms * 4;
  uint32_t* out = DeviceAlloc<uint32_t>(static_cast<size_t>(blocks) * threads / 32);
  const double ms = timer.MedianMs([&] {
    ReadXor<<<blocks, threads, 0, timer.stream>>>(data, bytes / sizeof(uint4), out);
    CUDA_CHECK(cudaGetLastError());
  });
  CUDA_CHECK(cudaFree(data));
  CUDA_CHECK(cudaFree(out));
  return static_cast<double>(bytes) / (ms * 1e-3) / 1e9;
}

// ---- GEMM ----------------------------------------------------------------------------------

enum class GemmType { kBf16, kFp8, kFp8FastAccum };

// D[M, N] (bf16, column-major, ld M) = A^T B with A stored [K rows, M cols] column-major
// (i.e. M x K row-major, "T") and B [K, N] column-major ("N"): the TN layout FP8 requires.
// Returns TFLOP/s (2 M N K per GEMM).
double GemmTflops(const Timer& timer, cublasLtHandle_t lt, GemmType type, int64_t m, int64_t n,
                  int64_t k) {
  const bool fp8 = type != GemmType::kBf16;
  const cudaDataType_t in_type = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  const size_t in_size = fp8 ? 1 : 2;
  void* a = DeviceAlloc<uint8_t>(static_cast<size_t>(m * k) * in_size);
  void* b = DeviceAlloc<uint8_t>(static_cast<size_t>(k * n) * in_size);
  void* d = DeviceAlloc<__nv_bfloat16>(static_cast<size_t>(m * n));
  void* workspace = DeviceAlloc<uint8_t>(kWorkspaceBytes);
  float* one = DeviceAlloc<float>(1);
  const float host_one = 1.0f;
  CUDA_CHECK(cudaMemcpy(one, &host_one, sizeof(float), cudaMemcpyHostToDevice));
  if (fp8) {
    FillFp8<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(static_cast<__nv_fp8_e4m3*>(a), m * k,
                                                            3);
    FillFp8<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(static_cast<__nv_fp8_e4m3*>(b), k * n,
                                                            4);
  } else {
    FillBf16<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(static_cast<__nv_bfloat16*>(a), m * k,
                                                             3);
    FillBf16<<<kFillBlocks, kFillThreads, 0, timer.stream>>>(static_cast<__nv_bfloat16*>(b), k * n,
                                                             4);
  }
  CUDA_CHECK(cudaGetLastError());

  cublasLtMatmulDesc_t op;
  CUBLAS_CHECK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)));
  CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)));
  if (fp8) {
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &one,
                                                sizeof(one)));
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &one,
                                                sizeof(one)));
    const int8_t fast_accum = type == GemmType::kFp8FastAccum ? 1 : 0;
    CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast_accum,
                                                sizeof(fast_accum)));
  }
  cublasLtMatrixLayout_t a_layout, b_layout, d_layout;
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_layout, in_type, k, m, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_layout, in_type, k, n, k));
  CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d_layout, CUDA_R_16BF, m, n, m));

  cublasLtMatmulPreference_t pref;
  CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const size_t workspace_bytes = kWorkspaceBytes;
  CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                    &workspace_bytes, sizeof(workspace_bytes)));
  cublasLtMatmulHeuristicResult_t heuristic;
  std::memset(&heuristic, 0, sizeof(heuristic));
  int found = 0;
  CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(lt, op, a_layout, b_layout, d_layout, d_layout, pref,
                                              1, &heuristic, &found));
  if (found == 0) {
    std::fprintf(stderr, "gpu_ceilings: no cuBLASLt algorithm for %s GEMM %lldx%lldx%lld\n",
                 fp8 ? "FP8" : "BF16", static_cast<long long>(m), static_cast<long long>(n),
                 static_cast<long long>(k));
    std::exit(1);
  }
  const float alpha = 1.0f, beta = 0.0f;
  const double ms = timer.MedianMs([&] {
    CUBLAS_CHECK(cublasLtMatmul(lt, op, &alpha, a, a_layout, b, b_layout, &beta, d, d_layout, d,
                                d_layout, &heuristic.algo, workspace, kWorkspaceBytes,
                                timer.stream));
  });

  CUBLAS_CHECK(cublasLtMatmulPreferenceDestroy(pref));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(a_layout));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(b_layout));
  CUBLAS_CHECK(cublasLtMatrixLayoutDestroy(d_layout));
  CUBLAS_CHECK(cublasLtMatmulDescDestroy(op));
  for (void* p : {a, b, d, workspace, static_cast<void*>(one)}) CUDA_CHECK(cudaFree(p));
  return 2.0 * static_cast<double>(m) * n * k / (ms * 1e-3) / 1e12;
}

// ---- main ----------------------------------------------------------------------------------

struct Options {
  std::string json_path;
  int repeats = 20;
};

void Usage() { std::fprintf(stderr, "usage: gpu_ceilings [--json PATH] [--repeats N>=20]\n"); }

bool ParseArgs(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--json" && i + 1 < argc) {
      options->json_path = argv[++i];
    } else if (arg == "--repeats" && i + 1 < argc) {
      options->repeats = std::atoi(argv[++i]);
      if (options->repeats < 20) return false;
    } else {
      return false;
    }
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!ParseArgs(argc, argv, &options)) {
    Usage();
    return 2;
  }
  int device = 0;
  CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop;
  CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  int clock_khz = 0;
  CUDA_CHECK(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  const int sms = prop.multiProcessorCount;

  Timer timer;
  timer.repeats = options.repeats;
  CUDA_CHECK(cudaStreamCreate(&timer.stream));
  cublasLtHandle_t lt;
  CUBLAS_CHECK(cublasLtCreate(&lt));

  std::printf("device: %s, %d SMs, %d MHz, %d timed runs (median)\n", prop.name, sms,
              clock_khz / 1000, options.repeats);
  const double copy_gbps = HbmCopyGBps(timer);
  std::printf("%-44s %10.1f GB/s\n", "HBM copy (cudaMemcpy D2D 4 GiB, r+w)", copy_gbps);
  const double read_gbps = HbmReadGBps(timer, sms);
  std::printf("%-44s %10.1f GB/s\n", "HBM read (16-byte loads, 8 GiB)", read_gbps);
  const double bf16 = GemmTflops(timer, lt, GemmType::kBf16, 8192, 8192, 8192);
  std::printf("%-44s %10.1f TFLOP/s\n", "BF16 GEMM 8192^3 (cuBLASLt)", bf16);
  const double fp8 = GemmTflops(timer, lt, GemmType::kFp8, 8192, 8192, 8192);
  std::printf("%-44s %10.1f TFLOP/s\n", "FP8 e4m3 GEMM 8192^3 (cuBLASLt, TN)", fp8);
  const double fp8_fast = GemmTflops(timer, lt, GemmType::kFp8FastAccum, 8192, 8192, 8192);
  std::printf("%-44s %10.1f TFLOP/s\n", "FP8 e4m3 GEMM 8192^3 (fast accumulation)", fp8_fast);
  std::vector<std::pair<int, double>> by_m;
  for (const int m : {16, 64, 256, 1024, 4096}) {
    by_m.emplace_back(m, GemmTflops(timer, lt, GemmType::kFp8, m, 5120, 5120));
    const std::string label = "FP8 GEMM M=" + std::to_string(m) + " N=K=5120";
    std::printf("%-44s %10.1f TFLOP/s\n", label.c_str(), by_m.back().second);
  }
  CUBLAS_CHECK(cublasLtDestroy(lt));
  CUDA_CHECK(cudaStreamDestroy(timer.stream));

  if (!options.json_path.empty()) {
    FILE* f = std::fopen(options.json_path.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "gpu_ceilings: cannot write %s\n", options.json_path.c_str());
      return 1;
    }
    std::fprintf(f,
                 "{\n  \"hbm_copy_GBps\": %.1f,\n  \"hbm_read_GBps\": %.1f,\n"
                 "  \"bf16_tflops\": %.1f,\n  \"fp8_tflops\": %.1f,\n"
                 "  \"fp8_fast_accum_tflops\": %.1f,\n  \"fp8_by_m\": {",
                 copy_gbps, read_gbps, bf16, fp8, fp8_fast);
    for (size_t i = 0; i < by_m.size(); ++i) {
      std::fprintf(f, "%s\"%d\": %.2f", i == 0 ? "" : ", ", by_m[i].first, by_m[i].second);
    }
    // Device names are plain ASCII without quotes or backslashes.
    std::fprintf(f, "},\n  \"device\": \"%s\",\n  \"sms\": %d,\n  \"clock\": %d\n}\n", prop.name,
                 sms, clock_khz / 1000);
    if (std::fclose(f) != 0) {
      std::fprintf(stderr, "gpu_ceilings: cannot write %s\n", options.json_path.c_str());
      return 1;
    }
    std::printf("wrote %s\n", options.json_path.c_str());
  }
  return 0;
}

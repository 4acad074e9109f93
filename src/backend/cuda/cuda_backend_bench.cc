// Timings of the CUDA backend's heavy ops at V4.1-Flash shapes (Google Benchmark, device
// time from CUDA events around each call). Run on the GPU machine:
//   build/bin/cuda_backend_bench [--benchmark_filter=Linear]
// Counters: weight_GBps = stored weight bytes / time (the decode roofline is ~4.3 TB/s).
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"

namespace deepinfer::backend::cuda {
namespace {

using model::WeightFormat;

std::unique_ptr<CudaBackend> Backend(benchmark::State& state) {
  auto b = CudaBackend::Create(0);
  if (!b.ok()) {
    state.SkipWithError(b.status().ToString().c_str());
    return nullptr;
  }
  return std::move(b).value();
}

// Fast random bytes in [lo, hi] (xorshift; the values only need to be plausible).
std::vector<uint8_t> QuickBytes(size_t n, int lo, int hi, uint64_t seed) {
  std::vector<uint8_t> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& x : v) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    x = static_cast<uint8_t>(lo + static_cast<int>((s >> 24) % static_cast<uint64_t>(hi - lo + 1)));
  }
  return v;
}

float* RandomDevice(CudaBackend* b, int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> h(n);
  for (auto& x : h) x = d(rng);
  float* p = b->AllocFloats(n);
  b->CopyToDevice(p, h.data(), n * sizeof(float));
  return p;
}

// Times `op` with CUDA events on the backend's stream (manual time).
template <typename Op>
void TimeOp(benchmark::State& state, CudaBackend* b, Op op) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  op();  // warm-up (weight upload, handle setup)
  if (!b->Synchronize().ok()) state.SkipWithError(b->status().ToString().c_str());
  for (auto _ : state) {
    cudaEventRecord(start, b->stream());
    op();
    cudaEventRecord(stop, b->stream());
    cudaEventSynchronize(stop);
    float ms = 0.0f;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms * 1e-3);
  }
  if (!b->Synchronize().ok()) state.SkipWithError(b->status().ToString().c_str());
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

// FP8-activation mode of BM_Linear: off, LinearFp8 at every T, or the bf16 cuBLAS GEMM on
// fake-quantised activations at every T.
enum LinearFp8Mode : int64_t { kFp8Off = 0, kFp8Kernel = 1, kFp8Bf16Gemm = 2 };

// args: format, T, rows, cols, gemv (0/1), LinearFp8Mode
void BM_Linear(benchmark::State& state) {
  const char* fp8_labels[] = {"", " fp8act LinearFp8", " fp8act bf16-gemm"};
  state.SetLabel("T=" + std::to_string(state.range(1)) + " " + std::to_string(state.range(2)) +
                 "x" + std::to_string(state.range(3)) + (state.range(4) ? " gemv" : " sgemm") +
                 fp8_labels[state.range(5)]);
  auto b = Backend(state);
  if (!b) return;
  const auto format = static_cast<WeightFormat>(state.range(0));
  const int64_t T = state.range(1), N = state.range(2), K = state.range(3);
  b->set_gemv_max_tokens(state.range(4) ? kernels::kMaxGemvTokens : 0);
  b->set_fp8_activations(state.range(5) != kFp8Off);
  b->set_fp8_bf16_gemm_min_tokens(state.range(5) == kFp8Bf16Gemm ? 1 : 0);
  size_t data_bytes = 0, scale_bytes = 0;
  std::vector<uint8_t> data, scale;
  if (format == WeightFormat::kMxFp4) {
    data = QuickBytes(N * K / 2, 0, 255, 1), scale = QuickBytes(N * K / 32, 118, 124, 2);
  } else if (format == WeightFormat::kBF16) {
    data = QuickBytes(N * K * 2, 0, 0x3e, 1);  // small positive/negative bf16s
  } else {
    data = QuickBytes(N * K, 0, 0x7e, 1),
    scale = QuickBytes(((N + 31) / 32) * (K / 32), 118, 124, 2);
  }
  data_bytes = data.size(), scale_bytes = scale.size();
  model::WeightRef w{"bench", format, N, K, data.data(), scale.empty() ? nullptr : scale.data()};
  float* x = RandomDevice(b.get(), T * K, 3);
  float* y = b->AllocFloats(T * N);
  TimeOp(state, b.get(), [&] { b->Linear(x, T, K, w, 0, N, y, N, false); });
  state.counters["weight_GBps"] = benchmark::Counter(static_cast<double>(data_bytes + scale_bytes),
                                                     benchmark::Counter::kIsIterationInvariantRate);
  state.counters["TFLOPs"] =
      benchmark::Counter(2.0 * T * N * K * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

void LinearArgs(benchmark::internal::Benchmark* bm) {
  const int64_t fp8 = static_cast<int64_t>(WeightFormat::kFp8Block32);
  const int64_t fp4 = static_cast<int64_t>(WeightFormat::kMxFp4);
  const int64_t bf16 = static_cast<int64_t>(WeightFormat::kBF16);
  // Decode shapes at T = 1, 8, 32 (GEMV when T <= kMaxGemvTokens, else dequant + SGEMM),
  // then the same without the GEMV for comparison.
  for (int64_t gemv : {1, 0}) {
    for (int64_t T : {1, 8, 32}) {
      bm->Args({fp8, T, 1280, 5120, gemv, kFp8Off});               // wq_a
      bm->Args({fp8, T, 16384, 5120, gemv, kFp8Off});              // a large FP8 projection
      bm->Args({fp4, T, 2304, 5120, gemv, kFp8Off});               // routed expert w1
      bm->Args({bf16, T, 16384, 5120, gemv, kFp8Off});             // head slice
      if (gemv) bm->Args({bf16, T, 129280, 5120, gemv, kFp8Off});  // whole head
    }
  }
  for (int64_t T : {128, 1024}) bm->Args({fp8, T, 1280, 5120, 0, kFp8Off});
  // 4k-token prefill in the FP8-activation mode: LinearFp8 vs the bf16 cuBLAS GEMM.
  for (int64_t mode : {kFp8Kernel, kFp8Bf16Gemm}) {
    bm->Args({fp8, 4096, 32768, 1280, 0, mode});  // wq_b
    bm->Args({fp8, 4096, 5120, 8192, 0, mode});   // wo_b
  }
}
BENCHMARK(BM_Linear)->Apply(LinearArgs)->UseManualTime()->Unit(benchmark::kMicrosecond);

// args: T, k, n_experts (MXFP4 experts, D 5120, I 2304; routing spread over all experts).
// weight_GBps counts the stored bytes of the distinct experts the routing touches.
void BM_RoutedExperts(benchmark::State& state) {
  auto b = Backend(state);
  if (!b) return;
  const int64_t T = state.range(0), k = state.range(1), n = state.range(2);
  const int64_t D = 5120, I = 2304;
  std::vector<std::vector<uint8_t>> bytes;
  bytes.reserve(6 * n);
  std::vector<model::ExpertWeights> table(n);
  auto matrix = [&](int64_t rows, int64_t cols, uint64_t seed) {
    bytes.push_back(QuickBytes(rows * cols / 2, 0, 255, seed));
    const uint8_t* data = bytes.back().data();
    bytes.push_back(QuickBytes(rows * cols / 32, 118, 124, seed + 1));
    return model::WeightRef{"bench.expert", WeightFormat::kMxFp4, rows, cols,
                            data,           bytes.back().data()};
  };
  for (int64_t e = 0; e < n; ++e) {
    table[e] = {matrix(I, D, 10 * e), matrix(D, I, 10 * e + 2), matrix(I, D, 10 * e + 4)};
  }
  std::vector<int32_t> ids(T * k);
  std::vector<bool> used(n, false);
  for (int64_t p = 0; p < T * k; ++p) {
    ids[p] = static_cast<int32_t>((p * 7 + (p / k) * 3) % n);  // distinct within a token if k <= n
    used[ids[p]] = true;
  }
  const std::vector<float> w(T * k, 0.3f);
  model::RoutedExpertsArgs a;
  a.x = RandomDevice(b.get(), T * D, 1), a.T = T, a.D = D, a.k = k;
  int32_t* dids = b->AllocInts(T * k);
  float* dw = b->AllocFloats(T * k);
  b->CopyToDevice(dids, ids.data(), T * k * 4);
  b->CopyToDevice(dw, w.data(), T * k * 4);
  a.experts = dids, a.weights = dw, a.table = table.data(), a.n_experts = n;
  a.swiglu_limit = 10.0f, a.y = b->AllocFloats(T * D);
  if (!b->CanFuseRoutedExperts(T, table[0])) {
    state.SkipWithError("not fusable");
    return;
  }
  TimeOp(state, b.get(), [&] { b->RoutedExperts(a); });
  int64_t distinct = 0;
  for (bool u : used) distinct += u ? 1 : 0;
  const double per_expert = 3.0 * (I * D / 2 + I * D / 32);
  state.counters["experts"] = static_cast<double>(distinct);
  state.counters["weight_GBps"] =
      benchmark::Counter(distinct * per_expert, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_RoutedExperts)
    ->Args({1, 6, 64})
    ->Args({8, 6, 64})
    ->Args({32, 6, 64})
    ->Args({64, 6, 64})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: tokens, n_select
void BM_SparseAttention(benchmark::State& state) {
  auto b = Backend(state);
  if (!b) return;
  const int64_t T = state.range(0), n_select = state.range(1), H = 64, d = 512, W = 128;
  const int64_t n_comp = 4096;
  std::vector<int32_t> pos(T), wpos(W), sel(T * n_select);
  for (int64_t t = 0; t < T; ++t) pos[t] = 10000 + static_cast<int32_t>(t);
  for (int64_t i = 0; i < W; ++i) wpos[i] = 10000 - static_cast<int32_t>(i);
  for (int64_t i = 0; i < T * n_select; ++i) sel[i] = static_cast<int32_t>((i * 7919) % n_comp);
  auto ints = [&](const std::vector<int32_t>& v) {
    int32_t* p = b->AllocInts(v.size());
    b->CopyToDevice(p, v.data(), v.size() * 4);
    return p;
  };
  model::SparseAttentionArgs a;
  a.q = RandomDevice(b.get(), T * H * d, 1), a.q_pos = ints(pos), a.tokens = T, a.heads = H;
  a.head_dim = d, a.window_kv = RandomDevice(b.get(), W * d, 2), a.window_pos = ints(wpos);
  a.n_window = W, a.window = W, a.comp_kv = RandomDevice(b.get(), n_comp * d, 3);
  a.n_comp = n_comp, a.selection = ints(sel), a.n_select = n_select;
  a.sinks = RandomDevice(b.get(), H, 4), a.scale = 0.044f, a.out = b->AllocFloats(T * H * d);
  TimeOp(state, b.get(), [&] { b->SparseAttention(a); });
}
BENCHMARK(BM_SparseAttention)
    ->Args({1, 512})
    ->Args({8, 512})
    ->Args({64, 512})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// FP8-mode prefill (CudaBackend takes SparseAttentionPrefill from 64 tokens): T tokens of
// one sequence, each attending the 128 window rows ending at its own position and
// n_select selected entries (640 candidates at n_select 512); rows exact bf16 (as the
// model's fake-quantised rows). FLOPs = 4 T H candidates d (S = q K^T and O = P V).
// args: tokens, n_select
void BM_SparseAttentionPrefill(benchmark::State& state) {
  auto b = Backend(state);
  if (!b) return;
  b->set_fp8_activations(true);
  b->set_batch_invariant(false);
  const int64_t T = state.range(0), n_select = state.range(1), H = 64, d = 512, W = 128;
  const int64_t n_window = T + W - 1, n_comp = 4096;
  std::vector<int32_t> pos(T), wpos(n_window), sel(T * n_select);
  for (int64_t t = 0; t < T; ++t) pos[t] = 10000 + static_cast<int32_t>(t);
  for (int64_t i = 0; i < n_window; ++i) wpos[i] = 10000 - static_cast<int32_t>(W - 1 - i);
  for (int64_t i = 0; i < T * n_select; ++i) sel[i] = static_cast<int32_t>((i * 7919) % n_comp);
  auto ints = [&](const std::vector<int32_t>& v) {
    int32_t* p = b->AllocInts(v.size());
    b->CopyToDevice(p, v.data(), v.size() * 4);
    return p;
  };
  auto bf16_rows = [&](int64_t n, uint64_t seed) {  // normal values truncated to bf16
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> dist(0.0f, 1.0f);
    std::vector<float> h(n);
    for (auto& x : h)
      x = __builtin_bit_cast(float, __builtin_bit_cast(uint32_t, dist(rng)) & 0xFFFF0000u);
    float* p = b->AllocFloats(n);
    b->CopyToDevice(p, h.data(), n * sizeof(float));
    return p;
  };
  model::SparseAttentionArgs a;
  a.q = RandomDevice(b.get(), T * H * d, 1), a.q_pos = ints(pos), a.tokens = T, a.heads = H;
  a.head_dim = d, a.window_kv = bf16_rows(n_window * d, 2), a.window_pos = ints(wpos);
  a.n_window = n_window, a.window = W, a.comp_kv = bf16_rows(n_comp * d, 3);
  a.n_comp = n_comp, a.selection = ints(sel), a.n_select = n_select;
  a.sinks = RandomDevice(b.get(), H, 4), a.scale = 0.044f, a.out = b->AllocFloats(T * H * d);
  TimeOp(state, b.get(), [&] { b->SparseAttention(a); });
  state.counters["FLOPs"] = benchmark::Counter(4.0 * T * H * (W + n_select) * d,
                                               benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_SparseAttentionPrefill)
    ->Args({4096, 512})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

// args: tokens, n_keys
void BM_IndexerTopK(benchmark::State& state) {
  auto b = Backend(state);
  if (!b) return;
  const int64_t T = state.range(0), n = state.range(1), heads = 32, dim = 128;
  float* q = RandomDevice(b.get(), T * heads * dim, 1);
  float* w = RandomDevice(b.get(), T * heads, 2);
  float* keys = RandomDevice(b.get(), n * dim, 3);
  std::vector<int32_t> pos(T, static_cast<int32_t>(4 * n));
  int32_t* q_pos = b->AllocInts(T);
  b->CopyToDevice(q_pos, pos.data(), T * 4);
  float* scores = b->AllocFloats(T * n);
  int32_t* idx = b->AllocInts(T * 512);
  TimeOp(state, b.get(), [&] {
    b->IndexerScores(q, w, T, heads, dim, keys, n, q_pos, 4, 0.088f, scores);
    b->TopK(scores, T, n, 512, idx);
  });
}
BENCHMARK(BM_IndexerTopK)
    ->Args({1, 16384})
    ->Args({1, 262144})
    ->Args({8, 65536})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace deepinfer::backend::cuda

BENCHMARK_MAIN();

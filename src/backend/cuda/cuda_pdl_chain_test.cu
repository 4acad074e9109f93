// The backend's kernels with programmatic dependent launch (pdl.cuh) on and off: decode-like
// chains of the kernel launchers (kernels*.h, which launch through pdl.cuh) and the kernels a
// decode step does not reach, each required to give bitwise identical results with PDL off
// and on (several runs), plus the PDL switch.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_launch_test_util.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_attn_prefill.h"
#include "backend/cuda/kernels_copy.h"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_indexer.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/kernels_stream.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::testing {
namespace {

// --- a decode-like chain of the backend's kernels, PDL on vs off -----------------------
//
// One "layer" runs, on T token rows: HcMix -> HcCollapse -> RmsNorm -> Linear (wq) -> Rope ->
// FakeQuant -> indexer scores -> candidate blocks (CandidateBlockScores, TopK, MarkKeptBlocks,
// ApplyMask) -> TopK selection -> GatherSelectedRows -> sparse attention (cluster launches) ->
// Linear (wo) -> Add -> RmsNorm -> router Linear -> RouteSqrtSoftplus -> routed experts ->
// shared expert (Linear, SwiGlu, Linear) -> Add -> Scale -> HcExpand (-> EngramGate), each
// kernel reading its predecessor's output, the kernel variants alternating by layer (fp32 /
// tensor-core attention and indexer, token-slot / grouped / FP8 / BF16 experts, GEMV / MMA /
// FP8 / streaming Linears). Every scratch buffer is NaN-poisoned by Fill kernels before a
// run, so a kernel that read its input before the predecessor finished would see NaN or the
// previous layer's values. The outputs (streams, logits, argmax ids, routing, selection) are
// gathered by CopyMany and must be bitwise the same with PDL off and on (several runs).
namespace kn = ::deepinfer::backend::cuda::kernels;
using model::WeightFormat;

constexpr int64_t kD = 512, kHc = 4, kHeads = 16, kHeadDim = 64, kQ = kHeads * kHeadDim;
constexpr int64_t kWindowRows = 48, kCompRows = 64, kSelect = 16, kRowsPerBlock = 16;
constexpr int64_t kCompBlocks = kCompRows / kRowsPerBlock;
constexpr int64_t kCandBlock = 8, kCandKeep = 4;  // candidate blocks of 8 entries, keep 4
constexpr int64_t kExperts = 16, kSlots = 2, kI = 256, kRopePairs = 16;
constexpr int kLayers = 6;

// Device buffers, random inputs and the first error of a chain (the base of the two chains).
class ChainBase {
 public:
  ChainBase(int64_t T, cudaStream_t stream) : T_(T), stream_(stream) {}
  virtual ~ChainBase() {
    for (void* p : allocations_) cudaFree(p);
  }
  ChainBase(const ChainBase&) = delete;
  ChainBase& operator=(const ChainBase&) = delete;

  // Draws the weights and inputs (fixed seed) and allocates the buffers.
  virtual cudaError_t Init(uint64_t seed) = 0;
  // Poisons the scratch, uploads the inputs, runs the chain and returns the result bytes;
  // `error` gets the first CUDA error (or a kernel error word).
  virtual std::vector<uint8_t> Run(cudaError_t* error) = 0;

 protected:
  template <typename V>
  V* Upload(const std::vector<V>& host) {
    void* p = nullptr;
    if (Note(cudaMalloc(&p, host.size() * sizeof(V)))) return nullptr;
    allocations_.push_back(p);
    Note(cudaMemcpy(p, host.data(), host.size() * sizeof(V), cudaMemcpyHostToDevice));
    return static_cast<V*>(p);
  }
  // Device floats that PoisonScratch fills with NaN (Fill kernels) before each run.
  float* Scratch(int64_t n) {
    float* p = Upload(std::vector<float>(n, 0.0f));
    scratch_.push_back({p, n});
    return p;
  }
  void PoisonScratch() {
    for (const Poisoned& s : scratch_) Note(kn::Fill(s.p, s.n, std::nanf(""), stream_));
  }
  void* Bytes(int64_t n) { return Upload(std::vector<uint8_t>(n, 0)); }
  bool Note(cudaError_t e) {
    if (e != cudaSuccess && error_ == cudaSuccess) error_ = e;
    return e != cudaSuccess;
  }
  std::vector<float> Normal(int64_t n, float stddev) {
    std::normal_distribution<float> dist(0.0f, stddev);
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng_);
    return v;
  }
  // Values exact in bf16 (the tensor-core attention requires K/V rows exact in bf16).
  std::vector<float> Bf16Exact(int64_t n) {
    std::vector<float> v = Normal(n, 1.0f);
    for (float& x : v) {
      uint32_t b;
      std::memcpy(&b, &x, 4);
      b &= 0xFFFF0000u;
      std::memcpy(&x, &b, 4);
    }
    return v;
  }
  std::vector<uint8_t> RandomBytes(int64_t n, int lo, int hi) {
    std::uniform_int_distribution<int> dist(lo, hi);
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = static_cast<uint8_t>(dist(rng_));
    return v;
  }
  kn::DeviceWeight Fp8Weight(int64_t rows, int64_t cols);
  kn::DeviceWeight MxFp4Weight(int64_t rows, int64_t cols);
  kn::DeviceWeight Bf16Weight(int64_t rows, int64_t cols);

  const int64_t T_;
  const cudaStream_t stream_;
  std::mt19937 rng_;
  cudaError_t error_ = cudaSuccess;

 private:
  struct Poisoned {
    float* p;
    int64_t n;
  };
  std::vector<void*> allocations_;
  std::vector<Poisoned> scratch_;
};

class DecodeChain final : public ChainBase {
 public:
  DecodeChain(int64_t T, bool fp8, cudaStream_t stream) : ChainBase(T, stream), fp8_(fp8) {}
  cudaError_t Init(uint64_t seed) override;
  std::vector<uint8_t> Run(cudaError_t* error) override;

 private:
  // y [T, n_rows] (ld ldy) = x [T, w.cols] W[row0 .. row0 + n_rows)^T by the path of this
  // mode and layer.
  void Linear(const kn::DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x, float* y,
              int64_t ldy, int layer);
  void Attention(int layer);
  void Experts(int layer);
  void Layer(int layer);

  const bool fp8_;

  // Weights and constant inputs.
  kn::DeviceWeight wq_, wo_, wr_, w13_, w2_;
  std::vector<float> x0_;
  float *hc_fn_ = nullptr, *hc_scale_ = nullptr, *hc_base_ = nullptr, *norm_w_ = nullptr;
  float *inv_freq_ = nullptr, *idx_w_ = nullptr, *window_kv_ = nullptr, *comp_kv_ = nullptr;
  float *sinks_ = nullptr, *route_bias_ = nullptr, *engram_key_ = nullptr, *engram_qw_ = nullptr;
  int32_t *q_pos_ = nullptr, *window_pos_ = nullptr, *comp_count_ = nullptr;
  int32_t *comp_offset_ = nullptr, *comp_len_ = nullptr;
  int64_t* comp_bases_ = nullptr;
  kn::ExpertPointers* expert_table_ = nullptr;
  // Activations and scratch.
  float *x_ = nullptr, *pre_ = nullptr, *post_ = nullptr, *comb_ = nullptr, *mix_ = nullptr;
  unsigned* mix_counters_ = nullptr;  // zeroed (Bytes); the fused HcMix leaves them zeroed
  float *h_ = nullptr, *hn_ = nullptr, *q_ = nullptr, *scores_ = nullptr, *block_scores_ = nullptr;
  float *gathered_ = nullptr, *o_ = nullptr, *a_ = nullptr, *f_ = nullptr, *logits_ = nullptr;
  float *route_w_ = nullptr, *y_ = nullptr, *g_ = nullptr, *u_ = nullptr, *s_ = nullptr;
  float *ys_ = nullptr, *moe_h_ = nullptr;
  int32_t *kept_ = nullptr, *selection_ = nullptr, *remapped_ = nullptr, *experts_ = nullptr;
  int32_t* ids_ = nullptr;
  uint8_t* mask_ = nullptr;
  int* error_word_ = nullptr;
  uint8_t* xq_ = nullptr;
  void *fp8_scratch_ = nullptr, *stream_scratch_ = nullptr, *moe_scratch_ = nullptr;
  uint8_t* result_ = nullptr;
  kn::CopyDesc* copies_ = nullptr;
  int64_t n_copies_ = 0, result_bytes_ = 0, max_copy_ = 0;
};

kn::DeviceWeight ChainBase::Fp8Weight(int64_t rows, int64_t cols) {
  // e4m3 bytes without the NaN codes; block scales 2^-15 .. 2^-11.
  std::vector<uint8_t> data = RandomBytes(rows * cols, 0, 0xFD);
  for (uint8_t& b : data) b = (b & 0x7F) == 0x7F ? 0x7E : b;
  const std::vector<uint8_t> scale = RandomBytes(((rows + 31) / 32) * ((cols + 31) / 32), 112, 116);
  return {WeightFormat::kFp8Block32, rows, cols, Upload(data), Upload(scale)};
}

kn::DeviceWeight ChainBase::MxFp4Weight(int64_t rows, int64_t cols) {
  const std::vector<uint8_t> data = RandomBytes(rows * cols / 2, 0, 255);
  const std::vector<uint8_t> scale = RandomBytes(rows * (cols / 32), 117, 120);
  return {WeightFormat::kMxFp4, rows, cols, Upload(data), Upload(scale)};
}

kn::DeviceWeight ChainBase::Bf16Weight(int64_t rows, int64_t cols) {
  const std::vector<float> v = Normal(rows * cols, 0.05f);
  std::vector<uint16_t> bits(v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    uint32_t b;
    std::memcpy(&b, &v[i], 4);
    bits[i] = static_cast<uint16_t>(b >> 16);
  }
  return {WeightFormat::kBF16, rows, cols, Upload(bits), nullptr};
}

cudaError_t DecodeChain::Init(uint64_t seed) {
  rng_.seed(static_cast<uint32_t>(seed));
  const int64_t T = T_;
  wq_ = Fp8Weight(kQ, kD);
  wo_ = MxFp4Weight(kD, kQ);
  wr_ = Bf16Weight(kExperts, kD);
  w13_ = Fp8Weight(2 * kI, kD);
  w2_ = Fp8Weight(kD, kI);
  std::vector<kn::ExpertPointers> table(kExperts);
  for (auto& e : table) {
    const kn::DeviceWeight w1 = MxFp4Weight(kI, kD), w2 = MxFp4Weight(kD, kI),
                           w3 = MxFp4Weight(kI, kD);
    e = {{w1.data, w2.data, w3.data}, {w1.scale, w2.scale, w3.scale}};
  }
  expert_table_ = Upload(table);
  x0_ = Normal(T * kHc * kD, 1.0f);
  hc_fn_ = Upload(Normal((2 + kHc) * kHc * kHc * kD, 0.02f));
  hc_scale_ = Upload(std::vector<float>{0.5f, 0.5f, 0.5f});
  hc_base_ = Upload(Normal((2 + kHc) * kHc, 0.1f));
  norm_w_ = Upload(Normal(kD, 0.2f));
  std::vector<float> inv_freq(kRopePairs);
  for (int64_t i = 0; i < kRopePairs; ++i) inv_freq[i] = std::pow(10000.0f, -float(i) / kRopePairs);
  inv_freq_ = Upload(inv_freq);
  idx_w_ = Upload(Normal(T * kHeads, 0.3f));
  window_kv_ = Upload(Bf16Exact(kWindowRows * kHeadDim));
  comp_kv_ = Upload(Bf16Exact(kCompRows * kHeadDim));
  sinks_ = Upload(Normal(kHeads, 1.0f));
  route_bias_ = Upload(Normal(kExperts, 0.1f));
  engram_key_ = Upload(Normal(T * kHc * kD, 1.0f));
  engram_qw_ = Upload(Normal(kHc * kD, 0.5f));
  std::vector<int32_t> q_pos(T), window_pos(kWindowRows), count(T, kCompRows), offset(T),
      len(T, kSelect);
  for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(kWindowRows - 1 + t);
  for (int64_t r = 0; r < kWindowRows; ++r) window_pos[r] = static_cast<int32_t>(r);
  for (int64_t t = 0; t < T; ++t) offset[t] = static_cast<int32_t>(t * kSelect);
  q_pos_ = Upload(q_pos);
  window_pos_ = Upload(window_pos);
  comp_count_ = Upload(count);
  comp_offset_ = Upload(offset);
  comp_len_ = Upload(len);
  std::vector<int64_t> bases(T * kCompBlocks);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t b = 0; b < kCompBlocks; ++b) {
      bases[t * kCompBlocks + b] = static_cast<int64_t>(
          reinterpret_cast<uintptr_t>(comp_kv_ + b * kRowsPerBlock * kHeadDim));
    }
  }
  comp_bases_ = Upload(bases);

  x_ = Scratch(T * kHc * kD);
  pre_ = Scratch(T * kHc);
  post_ = Scratch(T * kHc);
  comb_ = Scratch(T * kHc * kHc);
  mix_ = Scratch(T * kn::HcMixSplits(T, kHc, kD) * 25);
  mix_counters_ = static_cast<unsigned*>(Bytes(kn::kHcMixCounters * sizeof(unsigned)));
  h_ = Scratch(T * kD);
  hn_ = Scratch(T * kD);
  q_ = Scratch(T * kQ);
  scores_ = Scratch(T * kCompRows);
  block_scores_ = Scratch(T * (kCompRows / kCandBlock));
  gathered_ = Scratch(T * kSelect * kHeadDim);
  o_ = Scratch(T * kQ);
  a_ = Scratch(T * kD);
  f_ = Scratch(T * kD);
  logits_ = Scratch(T * kExperts);
  route_w_ = Scratch(T * kSlots);
  y_ = Scratch(T * kD);
  g_ = Scratch(T * kI);
  u_ = Scratch(T * kI);
  s_ = Scratch(T * kI);
  ys_ = Scratch(T * kD);
  moe_h_ = Scratch(kn::RoutedExpertsScratchFloats(T, kSlots, kI));
  kept_ = Upload(std::vector<int32_t>(T * kCandKeep, 0));
  selection_ = Upload(std::vector<int32_t>(T * kSelect, 0));
  remapped_ = Upload(std::vector<int32_t>(T * kSelect, 0));
  experts_ = Upload(std::vector<int32_t>(T * kSlots, 0));
  ids_ = Upload(std::vector<int32_t>(T, 0));
  mask_ = static_cast<uint8_t*>(Bytes(T * kCompRows));
  error_word_ = Upload(std::vector<int>(1, 0));
  xq_ = static_cast<uint8_t*>(Bytes(kn::Fp8ActivationBytes(T, kQ)));
  int64_t fp8_bytes = 0;
  for (const auto& [rows, cols] :
       {std::pair<int64_t, int64_t>{kQ, kD}, {kD, kQ}, {kI, kD}, {kD, kI}}) {
    fp8_bytes = std::max(fp8_bytes, kn::Fp8LinearScratchBytes(rows, cols, T));
  }
  fp8_scratch_ = Bytes(fp8_bytes);
  stream_scratch_ = Bytes(kn::LinearStreamScratchBytes(T, kQ));
  const int64_t moe_bytes =
      std::max({kn::RoutedExpertsGroupedScratchBytes(T, kSlots, kD, kI, kExperts),
                kn::RoutedExpertsFp8ScratchBytes(T, kSlots, kD, kI, kExperts),
                kn::RoutedExpertsBf16ScratchBytes(T, kSlots, kD, kI, kExperts)});
  moe_scratch_ = Bytes(moe_bytes);

  // The results, gathered by one CopyMany: streams, logits, ids, experts, selection.
  const std::vector<std::pair<const void*, int64_t>> parts = {
      {x_, T * kHc * kD * 4},     {logits_, T * kExperts * 4}, {ids_, T * 4},
      {experts_, T * kSlots * 4}, {route_w_, T * kSlots * 4},  {selection_, T * kSelect * 4}};
  for (const auto& part : parts) result_bytes_ += part.second;
  result_ = static_cast<uint8_t*>(Bytes(result_bytes_));
  std::vector<kn::CopyDesc> descs;
  int64_t at = 0;
  for (const auto& [src, bytes] : parts) {
    descs.push_back({result_ + at, src, bytes});
    at += bytes;
    max_copy_ = std::max(max_copy_, bytes);
  }
  n_copies_ = static_cast<int64_t>(descs.size());
  copies_ = Upload(descs);
  Note(cudaDeviceSynchronize());
  return error_;
}

void DecodeChain::Linear(const kn::DeviceWeight& w, int64_t row0, int64_t n_rows, const float* x,
                         float* y, int64_t ldy, int layer) {
  const int64_t K = w.cols;
  const bool fp8_weight = w.format != WeightFormat::kBF16;
  if (fp8_ && fp8_weight) {
    if (layer % 2 == 0 && kn::LinearStreamApplicable(w, row0, n_rows, T_)) {
      Note(kn::LinearStream(w, row0, n_rows, x, T_, K, y, ldy, false, stream_scratch_, stream_));
      return;
    }
    Note(
        kn::QuantizeFp8Activations(x, T_, K, K, xq_, kn::Fp8ActivationScales(xq_, T_, K), stream_));
    Note(kn::LinearFp8(w, row0, n_rows, xq_, kn::Fp8ActivationScales(xq_, T_, K), T_, y, ldy, false,
                       fp8_scratch_, stream_));
    return;
  }
  // Exact mode (and BF16 weights): the one-row GEMV, the tensor-core GEMM from 2 rows (and on
  // odd layers at one row too).
  if ((T_ == 1 && layer % 2 == 0 && kn::GemvApplicable(w, T_)) || !kn::MmaLinearApplicable(w, T_)) {
    if (!kn::GemvApplicable(w, T_)) {
      Note(cudaErrorNotSupported);
      return;
    }
    Note(kn::LinearGemv(w, row0, n_rows, x, T_, K, y, ldy, false, stream_));
    return;
  }
  Note(kn::LinearMma(w, row0, n_rows, x, T_, K, y, ldy, false, stream_));
}

void DecodeChain::Attention(int layer) {
  const int64_t T = T_;
  // Indexer scores of the roped q (as 16 heads x 64) against the compressed rows.
  if (layer % 2 == 1 && kn::IndexerMmaApplicable(q_, comp_kv_, T, kHeads, kHeadDim, 1)) {
    Note(kn::IndexerScoresMma(q_, idx_w_, T, kHeads, kHeadDim, comp_kv_, nullptr, nullptr,
                              kCompRows, q_pos_, 1, 0.125f, scores_, stream_));
  } else {
    Note(kn::IndexerScores(q_, idx_w_, T, kHeads, kHeadDim, comp_kv_, kCompRows, q_pos_, 1, 0.125f,
                           scores_, stream_));
  }
  // Two-level top-k: blocks of 8, keep 4, mask the rest, then the selection.
  const int64_t n_blocks = kCompRows / kCandBlock;
  Note(kn::CandidateBlockScores(scores_, T, kCompRows, q_pos_, 1, kCandBlock, block_scores_,
                                stream_));
  Note(kn::TopK(block_scores_, T, n_blocks, kCandKeep, kept_, stream_));
  Note(cudaMemsetAsync(mask_, 0, T * kCompRows, stream_));
  Note(kn::MarkKeptBlocks(kept_, T, kCandKeep, kCompRows, kCandBlock, mask_, stream_));
  Note(kn::ApplyMask(scores_, mask_, T * kCompRows, stream_));
  Note(kn::TopK(scores_, T, kCompRows, kSelect, selection_, stream_));
  Note(kn::GatherSelectedRows(selection_, T, kSelect, comp_bases_, kCompBlocks, comp_count_,
                              kRowsPerBlock, kHeadDim, gathered_, remapped_, stream_));
  model::SparseAttentionArgs args;
  args.q = q_;
  args.q_pos = q_pos_;
  args.tokens = T;
  args.heads = kHeads;
  args.head_dim = kHeadDim;
  args.window_kv = window_kv_;
  args.window_pos = window_pos_;
  args.n_window = kWindowRows;
  args.window = 128;
  args.comp_kv = gathered_;
  args.n_comp = T * kSelect;
  args.selection = remapped_;
  args.n_select = kSelect;
  args.sinks = sinks_;
  args.scale = 0.125f;
  args.out = o_;
  args.comp_offset = comp_offset_;
  args.comp_len = comp_len_;
  if (layer % 2 == 1 && kn::SparseAttentionMmaApplicable(args)) {
    Note(kn::SparseAttentionMma(args, error_word_, stream_, /*bf16_rounded=*/fp8_));
  } else {
    Note(kn::SparseAttention(args, error_word_, stream_));
  }
}

void DecodeChain::Experts(int layer) {
  kn::RoutedExpertsLaunch l;
  l.table = expert_table_;
  l.n_experts = kExperts;
  l.D = kD;
  l.I = kI;
  l.x = f_;
  l.T = T_;
  l.experts = experts_;
  l.weights = route_w_;
  l.k = kSlots;
  l.swiglu_limit = 7.0f;
  l.y = y_;
  l.error_word = error_word_;
  const auto f = WeightFormat::kMxFp4;
  if (fp8_) {
    if (layer % 2 == 1 && kn::RoutedExpertsBf16Applicable(f, f, kD, kI, T_, kSlots, kExperts)) {
      Note(kn::RoutedExpertsBf16(l, moe_scratch_, stream_));
    } else {
      Note(kn::RoutedExpertsFp8(l, moe_scratch_, stream_));
    }
    return;
  }
  if (layer % 2 == 1 && kn::RoutedExpertsGroupedApplicable(f, f, kD, kI, T_, kSlots, kExperts) &&
      T_ >= kn::kGroupedExpertsMinTokens) {
    Note(kn::RoutedExpertsGrouped(l, moe_scratch_, stream_));
  } else {
    Note(kn::RoutedExperts(l, moe_h_, stream_));
  }
}

void DecodeChain::Layer(int layer) {
  const int64_t T = T_;
  const model::HcSiteWeights site{hc_fn_, hc_scale_, hc_base_};
  Note(kn::HcMixSplit(x_, T, kHc, kD, site, 1e-6f, 1e-6f, 20, pre_, post_, comb_, mix_,
                      mix_counters_, stream_));
  Note(kn::HcCollapse(x_, pre_, T, kHc, kD, h_, stream_));
  Note(kn::RmsNorm(h_, T, kD, kD, norm_w_, 1e-6f, hn_, kD, stream_));
  Linear(wq_, 0, kQ, hn_, q_, kQ, layer);
  Note(kn::Rope(q_, T, kQ, kHeads, kHeadDim, kHeadDim - 2 * kRopePairs, kRopePairs, q_pos_,
                inv_freq_, false, stream_));
  Note(kn::FakeQuant(q_, T, kQ, kQ, model::FakeQuantKind::kFp8Block32Pow2, stream_));
  Attention(layer);
  Linear(wo_, 0, kD, o_, a_, kD, layer);
  Note(kn::Add(h_, a_, T * kD, h_, stream_));
  Note(kn::RmsNorm(h_, T, kD, kD, norm_w_, 1e-6f, f_, kD, stream_));
  Linear(wr_, 0, kExperts, f_, logits_, kExperts, layer);
  Note(kn::RouteSqrtSoftplus(logits_, route_bias_, T, kExperts, kSlots, true, 1.5f, experts_,
                             route_w_, stream_));
  Experts(layer);
  Linear(w13_, 0, kI, f_, g_, kI, layer);
  Linear(w13_, kI, kI, f_, u_, kI, layer);
  Note(kn::SwiGlu(g_, u_, T, kI, 7.0f, nullptr, s_, stream_));
  Linear(w2_, 0, kD, s_, ys_, kD, layer);
  Note(kn::Add(y_, ys_, T * kD, y_, stream_));
  Note(kn::Scale(y_, T * kD, 0.5f, stream_));
  Note(kn::HcExpand(y_, post_, comb_, T, kHc, kD, x_, stream_));
  if (layer % 3 == 2) {
    Note(kn::EngramGate(x_, engram_key_, y_, engram_qw_, engram_qw_, T, kHc, kD, 1e-6f, stream_));
  }
}

std::vector<uint8_t> DecodeChain::Run(cudaError_t* error) {
  PoisonScratch();
  Note(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_));
  Note(
      cudaMemcpyAsync(x_, x0_.data(), x0_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  for (int layer = 0; layer < kLayers; ++layer) Layer(layer);
  Note(kn::HcCollapse(x_, pre_, T_, kHc, kD, h_, stream_));
  Note(kn::ArgmaxRows(h_, T_, kD, kD, ids_, stream_));
  Note(kn::CopyMany(copies_, n_copies_, max_copy_, stream_));
  std::vector<uint8_t> out(result_bytes_);
  int error_word = -1;
  Note(cudaMemcpyAsync(out.data(), result_, out.size(), cudaMemcpyDeviceToHost, stream_));
  Note(cudaMemcpyAsync(&error_word, error_word_, sizeof(int), cudaMemcpyDeviceToHost, stream_));
  Note(cudaStreamSynchronize(stream_));
  if (error_word != 0) Note(cudaErrorUnknown);
  *error = error_;
  return out;
}

// --- the kernels a decode step does not reach, in one chain at T = 520 -----------------
//
// RmsNorm (scalar kernel) -> EngramGate (scalar kernel); RmsNorm -> FakeQuant (e2m1 blocks of
// 16) -> FP8 quantisation -> LinearFp8 (128 x 128 tiles) -> QuantizeFp8ActivationsBf16,
// SplitBf16, DequantRows(Bf16), GatherWeightRows, GatherTokenRows -> ScatterAddRows (unique
// and ordered) -> GatedPool, the indexer's row-group kernel -> TopK (uncached keys) and
// RouteSqrtSoftplus (block kernel, 640 experts), Add -> SparseAttentionPrefill.
class PrefillChain final : public ChainBase {
 public:
  explicit PrefillChain(cudaStream_t stream) : ChainBase(kT, stream) {}
  cudaError_t Init(uint64_t seed) override;
  std::vector<uint8_t> Run(cudaError_t* error) override;

 private:
  static constexpr int64_t kT = 520, kK = 512, kN = 1024, kNarrow = 510, kKeys = 2048;
  static constexpr int64_t kIdxHeads = 16, kIdxDim = 64, kRouted = 640, kRouteK = 8;
  static constexpr int64_t kAttnHeads = 64, kAttnDim = 64, kAttnSelect = 16, kPoolRatio = 4;
  static constexpr int64_t kGatherRows = 64, kWeightRows = 64;

  void Attention();

  kn::DeviceWeight w_;
  std::vector<float> x0_;
  float *x_ = nullptr, *engram_key_ = nullptr, *engram_value_ = nullptr, *engram_w_ = nullptr;
  float *idx_w_ = nullptr, *keys_ = nullptr, *route_bias_ = nullptr, *q_a_ = nullptr;
  float *q_b_ = nullptr, *window_kv_ = nullptr, *sinks_ = nullptr;
  int32_t *q_pos_ = nullptr, *window_pos_ = nullptr, *rows_unique_ = nullptr;
  int32_t* rows_repeated_ = nullptr;
  int64_t* weight_ids_ = nullptr;
  // Outputs (all compared).
  float *narrow_ = nullptr, *xn_ = nullptr, *y_ = nullptr, *dq_ = nullptr, *gw_ = nullptr;
  float *g64_ = nullptr, *pooled_ = nullptr, *scores_ = nullptr, *logits_ = nullptr;
  float *route_w_ = nullptr, *q_ = nullptr, *out_ = nullptr;
  uint16_t *yb_ = nullptr, *hi_ = nullptr, *mid_ = nullptr, *lo_ = nullptr, *dqb_ = nullptr;
  int32_t *top_ = nullptr, *sel_ = nullptr, *experts_ = nullptr;
  uint8_t* xq_ = nullptr;
  void* fp8_scratch_ = nullptr;
  int* error_word_ = nullptr;
  std::vector<std::pair<const void*, int64_t>> outputs_;  // (device pointer, bytes)
};

cudaError_t PrefillChain::Init(uint64_t seed) {
  rng_.seed(static_cast<uint32_t>(seed));
  const int64_t T = kT;
  w_ = Fp8Weight(kN, kK);
  x0_ = Normal(T * kK, 1.0f);
  x_ = Upload(x0_);
  engram_key_ = Upload(Normal(T * kNarrow, 1.0f));
  engram_value_ = Upload(Normal(T * kNarrow, 1.0f));
  engram_w_ = Upload(Normal(kNarrow, 0.5f));
  idx_w_ = Upload(Normal(T * kIdxHeads, 0.3f));
  keys_ = Upload(Bf16Exact(kKeys * kIdxDim));  // also the attention's compressed rows
  route_bias_ = Upload(Normal(kRouted, 0.1f));
  q_a_ = Upload(Normal(T * kAttnHeads * kAttnDim, 0.5f));
  q_b_ = Upload(Normal(T * kAttnHeads * kAttnDim, 0.5f));
  window_kv_ = Upload(Bf16Exact(64 * kAttnDim));
  sinks_ = Upload(Normal(kAttnHeads, 1.0f));
  std::vector<int32_t> q_pos(T), window_pos(64), unique(kGatherRows), repeated(kGatherRows);
  for (int64_t t = 0; t < T; ++t) q_pos[t] = static_cast<int32_t>(1600 + t);
  for (int64_t r = 0; r < 64; ++r) window_pos[r] = static_cast<int32_t>(1600 - 64 + r);
  for (int64_t i = 0; i < kGatherRows; ++i) {
    unique[i] = static_cast<int32_t>((i * 7) % T);
    repeated[i] = static_cast<int32_t>(i % 5);
  }
  q_pos_ = Upload(q_pos);
  window_pos_ = Upload(window_pos);
  rows_unique_ = Upload(unique);
  rows_repeated_ = Upload(repeated);
  weight_ids_ = Upload(std::vector<int64_t>{3, 1000, 0, 512, 77, 1023, 64, 5});

  auto out = [&](auto* p, int64_t bytes) {
    outputs_.push_back({p, bytes});
    return p;
  };
  auto u16 = [&](int64_t n) { return out(static_cast<uint16_t*>(Bytes(n * 2)), n * 2); };
  auto i32 = [&](int64_t n) { return out(static_cast<int32_t*>(Bytes(n * 4)), n * 4); };
  narrow_ = out(Scratch(T * kNarrow), T * kNarrow * 4);
  xn_ = out(Scratch(T * kK), T * kK * 4);
  y_ = out(Scratch(T * kN), T * kN * 4);
  dq_ = out(Scratch(kWeightRows * kK), kWeightRows * kK * 4);
  gw_ = out(Scratch(8 * kK), 8 * kK * 4);
  g64_ = out(Scratch(kGatherRows * kN), kGatherRows * kN * 4);
  pooled_ = out(Scratch(T / kPoolRatio * kN), T / kPoolRatio * kN * 4);
  scores_ = out(Scratch(T * kKeys), T * kKeys * 4);
  logits_ = out(Scratch(T * kRouted), T * kRouted * 4);
  route_w_ = out(Scratch(T * kRouteK), T * kRouteK * 4);
  q_ = Scratch(T * kAttnHeads * kAttnDim);
  out_ = out(Scratch(T * kAttnHeads * kAttnDim), T * kAttnHeads * kAttnDim * 4);
  yb_ = u16(T * kN);
  hi_ = u16(T * kN);
  mid_ = u16(T * kN);
  lo_ = u16(T * kN);
  dqb_ = u16(kWeightRows * kK);
  top_ = i32(T * 64);
  sel_ = i32(T * kAttnSelect);
  experts_ = i32(T * kRouteK);
  xq_ = static_cast<uint8_t*>(Bytes(kn::Fp8ActivationBytes(T, kK)));
  fp8_scratch_ = Bytes(kn::Fp8LinearScratchBytes(kN, kK, T));
  error_word_ = Upload(std::vector<int>(1, 0));
  Note(cudaDeviceSynchronize());
  return error_;
}

void PrefillChain::Attention() {
  model::SparseAttentionArgs args;
  args.q = q_;
  args.q_pos = q_pos_;
  args.tokens = kT;
  args.heads = kAttnHeads;
  args.head_dim = kAttnDim;
  args.window_kv = window_kv_;
  args.window_pos = window_pos_;
  args.n_window = 64;
  args.window = 128;
  args.comp_kv = keys_;
  args.n_comp = kKeys;
  args.selection = sel_;
  args.n_select = kAttnSelect;
  args.sinks = sinks_;
  args.scale = 0.125f;
  args.out = out_;
  if (!kn::SparseAttentionPrefillApplicable(args)) {
    Note(cudaErrorNotSupported);
    return;
  }
  Note(kn::SparseAttentionPrefill(args, error_word_, stream_));
}

std::vector<uint8_t> PrefillChain::Run(cudaError_t* error) {
  const int64_t T = kT;
  const float eps = 1e-6f;
  PoisonScratch();
  Note(cudaMemsetAsync(error_word_, 0, sizeof(int), stream_));
  Note(
      cudaMemcpyAsync(x_, x0_.data(), x0_.size() * sizeof(float), cudaMemcpyHostToDevice, stream_));
  Note(kn::RmsNorm(x_, T, kNarrow, kK, nullptr, eps, narrow_, kNarrow, stream_));
  Note(kn::EngramGate(narrow_, engram_key_, engram_value_, engram_w_, engram_w_, T, 1, kNarrow, eps,
                      stream_));
  Note(kn::RmsNorm(x_, T, kK, kK, nullptr, eps, xn_, kK, stream_));
  Note(kn::FakeQuant(xn_, T, kK, kK, model::FakeQuantKind::kFp4Block16E4m3, stream_));
  float* xs = kn::Fp8ActivationScales(xq_, T, kK);
  Note(kn::QuantizeFp8Activations(xn_, T, kK, kK, xq_, xs, stream_));
  Note(kn::LinearFp8(w_, 0, kN, xq_, xs, T, y_, kN, false, fp8_scratch_, stream_));
  Note(kn::QuantizeFp8ActivationsBf16(y_, T, kN, kN, yb_, stream_));
  Note(kn::SplitBf16(y_, T, kN, kN, hi_, mid_, lo_, stream_));
  Note(kn::DequantRows(w_, 0, kWeightRows, dq_, stream_));
  Note(kn::DequantRowsBf16(w_, kWeightRows, kWeightRows, dqb_, stream_));
  Note(kn::GatherWeightRows(w_, weight_ids_, 8, gw_, stream_));
  Note(kn::GatherTokenRows(y_, kN, rows_unique_, kGatherRows, kN, g64_, stream_));
  Note(kn::ScatterAddRows(g64_, kGatherRows, kN, rows_unique_, true, y_, kN, stream_));
  Note(kn::ScatterAddRows(g64_, kGatherRows, kN, rows_repeated_, false, y_, kN, stream_));
  Note(kn::GatedPool(y_, y_, T / kPoolRatio, kPoolRatio, kN, pooled_, stream_));
  Note(kn::IndexerScoresMmaGrouped(y_, idx_w_, T, kIdxHeads, kIdxDim, keys_, nullptr, nullptr,
                                   kKeys, q_pos_, 1, 0.125f, scores_,
                                   kn::IndexerMmaGroupRows(kIdxHeads, kIdxDim), stream_));
  Note(kn::TopK(scores_, T, kKeys, 64, top_, stream_));
  Note(kn::TopK(scores_, T, kKeys, kAttnSelect, sel_, stream_));
  Note(kn::RmsNorm(y_, T, kRouted, kN, nullptr, eps, logits_, kRouted, stream_));
  Note(kn::RouteSqrtSoftplus(logits_, route_bias_, T, kRouted, kRouteK, true, 1.0f, experts_,
                             route_w_, stream_));
  Note(kn::Add(q_a_, q_b_, T * kAttnHeads * kAttnDim, q_, stream_));
  Attention();
  std::vector<uint8_t> result;
  for (const auto& [p, bytes] : outputs_) {
    std::vector<uint8_t> part(bytes);
    Note(cudaMemcpyAsync(part.data(), p, bytes, cudaMemcpyDeviceToHost, stream_));
    Note(cudaStreamSynchronize(stream_));
    result.insert(result.end(), part.begin(), part.end());
  }
  int error_word = -1;
  Note(cudaMemcpy(&error_word, error_word_, sizeof(int), cudaMemcpyDeviceToHost));
  if (error_word != 0) Note(cudaErrorUnknown);
  *error = error_;
  return result;
}

// Restores the process-wide PDL switch when a test ends.
class PdlSwitchGuard {
 public:
  PdlSwitchGuard() : was_(kn::pdl::Enabled()) {}
  ~PdlSwitchGuard() { kn::pdl::SetEnabled(was_); }

 private:
  bool was_;
};

// Number of non-finite floats among the first n_floats of the result (the streams).
int64_t NonFinite(const std::vector<uint8_t>& result, int64_t n_floats) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n_floats; ++i) {
    float v;
    std::memcpy(&v, result.data() + 4 * i, 4);
    bad += std::isfinite(v) ? 0 : 1;
  }
  return bad;
}

// Runs `chain` with PDL off, then 5 times with PDL on: every run bitwise the first.
// `stream_floats`: how many leading result floats must be finite.
void ExpectSameWithAndWithoutPdl(ChainBase& chain, uint64_t seed, int64_t stream_floats) {
  PdlSwitchGuard guard;
  ASSERT_EQ(chain.Init(seed), cudaSuccess);
  kn::pdl::SetEnabled(false);
  cudaError_t e = cudaSuccess;
  const std::vector<uint8_t> plain = chain.Run(&e);
  ASSERT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  // (A NaN here would mean a kernel read a poisoned buffer even in plain stream order: the
  // chain itself would be broken.)
  ASSERT_EQ(NonFinite(plain, stream_floats), 0);
  kn::pdl::SetEnabled(true);
  for (int run = 0; run < 5; ++run) {
    const std::vector<uint8_t> pdl = chain.Run(&e);
    ASSERT_EQ(e, cudaSuccess) << "run " << run << ": " << cudaGetErrorString(e);
    ASSERT_EQ(pdl.size(), plain.size());
    int64_t differing = 0, first = -1;
    for (size_t i = 0; i < pdl.size(); ++i) {
      if (pdl[i] != plain[i]) {
        if (first < 0) first = static_cast<int64_t>(i);
        ++differing;
      }
    }
    EXPECT_EQ(differing, 0) << "run " << run << ": first differing byte " << first << " of "
                            << plain.size();
  }
}

void ExpectChainSameWithAndWithoutPdl(int64_t T, bool fp8, cudaStream_t stream) {
  SCOPED_TRACE(::testing::Message() << "T " << T << (fp8 ? " FP8 activations" : " exact"));
  DecodeChain chain(T, fp8, stream);
  ExpectSameWithAndWithoutPdl(chain, 1000 + static_cast<uint64_t>(T), T * kHc * kD);
}

TEST_F(CudaLaunchTest, DecodeChainBitwiseSameWithPdlExact) {
  for (int64_t T : {1, 5, 32}) ExpectChainSameWithAndWithoutPdl(T, /*fp8=*/false, stream_);
}

TEST_F(CudaLaunchTest, DecodeChainBitwiseSameWithPdlFp8Activations) {
  for (int64_t T : {1, 5, 32}) ExpectChainSameWithAndWithoutPdl(T, /*fp8=*/true, stream_);
}

TEST_F(CudaLaunchTest, PrefillKernelsBitwiseSameWithPdl) {
  PrefillChain chain(stream_);
  // The first output is the EngramGate rows [520, 510]: finite.
  ExpectSameWithAndWithoutPdl(chain, 77, /*stream_floats=*/520 * 510);
}

// The switch: SetEnabled overrides the environment (DEEPINFER_CUDA_PDL) both ways.
TEST_F(CudaLaunchTest, PdlSwitchOverridesEnvironment) {
  PdlSwitchGuard guard;
  kn::pdl::SetEnabled(false);
  EXPECT_FALSE(kn::pdl::Enabled());
  kn::pdl::SetEnabled(true);
  EXPECT_TRUE(kn::pdl::Enabled());
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing

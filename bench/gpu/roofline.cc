#include "roofline.h"

#include <algorithm>
#include <cmath>

namespace deepinfer::bench {
namespace {

double Fp8Bytes(double rows, double cols) {
  return rows * cols + std::ceil(rows / 32) * std::ceil(cols / 32);
}
double Fp4Bytes(double rows, double cols) { return rows * cols / 2 + rows * cols / 32; }
double Bf16Bytes(double rows, double cols) { return 2 * rows * cols; }

constexpr double kWindowRowBytes = 528;  // per 512-wide row; scaled by head_dim / 512 below
constexpr double kEntryBytesPer512 = 288;
constexpr double kKeyBytesPer128 = 68;

// Weights one token's pass through layer l multiplies by (parameters) and their bytes,
// excluding the routed experts.
struct LayerWeights {
  double params = 0;
  double bytes = 0;
  void Fp8(double r, double c) { params += r * c, bytes += Fp8Bytes(r, c); }
  void Bf16(double r, double c) { params += r * c, bytes += Bf16Bytes(r, c); }
  void F32(double r, double c) { params += r * c, bytes += 4 * r * c; }
};

LayerWeights DenseLayer(const io::ModelConfig& config, int l) {
  const io::TextConfig& t = config.text();
  const double D = t.hidden_size, d = t.head_dim, H = t.num_attention_heads, q = t.q_lora_rank;
  const double G = t.o_groups, R = t.o_lora_rank, hc = t.hc_mult, I = t.moe_intermediate_size;
  LayerWeights w;
  w.Fp8(q, D);
  w.Fp8(H * d, q);
  w.Fp8(d, D);
  w.Fp8(G * R, H * d / G);
  w.Fp8(D, G * R);
  w.F32(2 * (2 + hc) * hc, hc * D);  // mHC projections of both sites
  if (config.IsKvSource(l)) {
    w.Bf16(d, D);
    if (config.CompressRatio(l) > 1) w.Bf16(d, D);
  }
  if (config.IsIndexSource(l)) {
    w.Fp8(t.index_n_heads * t.index_head_dim, q);
    w.Bf16(t.index_n_heads, D);
    if (config.IsKvSource(l)) w.Bf16(t.index_head_dim, d);
  }
  w.Bf16(t.n_routed_experts, D);  // router
  for (int s = 0; s < t.n_shared_experts; ++s) {
    w.Fp8(I, D), w.Fp8(I, D), w.Fp8(D, I);
  }
  if (config.IsEngramLayer(l)) {
    const double cols = static_cast<double>(t.engram_max_ngram_size - 1) * t.engram_n_heads *
                        static_cast<double>(t.engram_head_dim);
    w.Fp8((hc + 1) * D, cols);
  }
  return w;
}

// Per-query attention work of layer l for a sequence whose length (incl. the query) is n.
void AttentionPerQuery(const io::ModelConfig& config, int l, int64_t n, double* bytes,
                       double* flops) {
  const io::TextConfig& t = config.text();
  const double d = t.head_dim, H = t.num_attention_heads;
  const double window = static_cast<double>(std::min<int64_t>(n, t.sliding_window));
  double keys = window;
  *bytes += window * kWindowRowBytes * d / 512;
  const int r = config.CompressRatio(l);
  if (r > 0) {
    const int64_t visible = n / r;  // completed groups (integer division intended)
    const double entries = static_cast<double>(visible);
    const double selected = std::min<double>(static_cast<double>(t.index_topk), entries);
    keys += selected;
    *bytes += selected * kEntryBytesPer512 * d / 512;
    if (config.IsIndexSource(l)) {
      *bytes += entries * kKeyBytesPer128 * t.index_head_dim / 128;
      *flops += 2 * t.index_n_heads * entries * t.index_head_dim;
    }
  }
  *flops += 4 * H * keys * d;
}

double EngramRowBytes(const io::TextConfig& t) {
  return static_cast<double>(t.engram_max_ngram_size - 1) * t.engram_n_heads *
         static_cast<double>(t.engram_head_dim) * (1 + 1.0 / 32);
}

}  // namespace

double ExpectedDistinctExperts(int64_t n_experts, int64_t k, int64_t tokens) {
  const double E = static_cast<double>(n_experts);
  return E * (1 - std::pow(1 - static_cast<double>(k) / E, static_cast<double>(tokens)));
}

double ExpertBytes(const io::ModelConfig& config) {
  const io::TextConfig& t = config.text();
  const double D = t.hidden_size, I = t.moe_intermediate_size;
  return 2 * Fp4Bytes(I, D) + Fp4Bytes(D, I);
}

StepCost DecodeStepCost(const io::ModelConfig& config, int64_t batch, int64_t context) {
  const io::TextConfig& t = config.text();
  const double B = static_cast<double>(batch), D = t.hidden_size, I = t.moe_intermediate_size;
  const double expert_params = 3 * D * I;
  StepCost c;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const LayerWeights w = DenseLayer(config, l);
    c.weight_bytes += w.bytes;
    c.gemm_flops += 2 * B * (w.params + t.num_experts_per_tok * expert_params);
    const double experts =
        ExpectedDistinctExperts(t.n_routed_experts, t.num_experts_per_tok, batch);
    c.expert_bytes += experts * ExpertBytes(config);
    if (config.IsEngramLayer(l)) c.state_bytes += B * EngramRowBytes(t);
    double bytes = 0, flops = 0;
    AttentionPerQuery(config, l, context + 1, &bytes, &flops);
    c.state_bytes += B * bytes;
    c.attn_flops += B * flops;
  }
  c.weight_bytes += c.expert_bytes;
  c.weight_bytes += Bf16Bytes(static_cast<double>(t.vocab_size), D) + B * 2 * D;  // head, embed
  c.gemm_flops += 2 * B * static_cast<double>(t.vocab_size) * D;
  return c;
}

StepCost PrefillCost(const io::ModelConfig& config, int64_t prompt) {
  const io::TextConfig& t = config.text();
  const double P = static_cast<double>(prompt), D = t.hidden_size, I = t.moe_intermediate_size;
  StepCost c;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    const LayerWeights w = DenseLayer(config, l);
    c.weight_bytes += w.bytes;
    c.gemm_flops += 2 * P * (w.params + t.num_experts_per_tok * 3 * D * I);
    c.expert_bytes += ExpectedDistinctExperts(t.n_routed_experts, t.num_experts_per_tok, prompt) *
                      ExpertBytes(config);
    if (config.IsEngramLayer(l)) c.state_bytes += P * EngramRowBytes(t);
    // Attention of every position; sampled every `step` positions to keep this cheap.
    const int64_t step = std::max<int64_t>(1, prompt / 4096);
    double bytes = 0, flops = 0;
    for (int64_t p = 1; p <= prompt; p += step) AttentionPerQuery(config, l, p, &bytes, &flops);
    c.attn_flops += flops * static_cast<double>(step);
    (void)bytes;  // state written once and read from cache; counted as activations, not here
  }
  c.weight_bytes += c.expert_bytes;
  c.weight_bytes += Bf16Bytes(static_cast<double>(t.vocab_size), D) + P * 2 * D;
  c.gemm_flops += 2 * static_cast<double>(t.vocab_size) * D;
  return c;
}

}  // namespace deepinfer::bench

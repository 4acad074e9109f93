// The bytes that must move and the FLOPs that must run for one V4.1 decode step or prefill,
// computed from a ModelConfig alone (the "two numbers" of a roofline; kernels.md §H200).
//
// Conventions (what an ideal implementation moves, not what ours happens to move):
// * Weights in their stored formats: FP8 e4m3 + one e8m0 per 32x32 block, MXFP4 (0.5 B per
//   value + one e8m0 per 32), BF16, F32. Each weight a step needs is read once per step.
// * Routed experts: a decode step of B tokens reads the distinct experts its tokens pick;
//   under uniform routing the expected count per layer is E * (1 - (1 - k/E)^B). A prefill
//   reads every expert (P * k >> E).
// * Per-sequence state at the release's packed precision: window KV 528 B per row (512 e4m3
//   + 16 e8m0), a compressed entry 288 B (256 B e2m1 + 32 e4m3 scales per 16), an index key
//   68 B (64 B e2m1 + 4 e8m0 per 32). A decode step of a sequence of length C reads its
//   window (min(C + 1, W) rows) in every layer, min(index_topk, C / r) selected entries in
//   every ratio-r layer and all C / r index keys in every index source.
// * FLOPs: 2 per multiply-add. Linear layers 2 * rows * params; attention 4 * heads * keys *
//   head_dim per query (QK and PV); indexer 2 * heads * keys * index_head_dim per query.
//   Element-wise work (norms, RoPE, mHC mixes, SwiGLU, top-k) is left out: it is small.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/model_config.h"

namespace deepinfer::bench {

struct StepCost {
  double weight_bytes = 0;  // dense + expert + head/embedding weights read
  double expert_bytes = 0;  // the routed-expert part of weight_bytes
  double state_bytes = 0;   // KV / compressed state read (packed precision)
  double gemm_flops = 0;    // linear layers (incl. experts, head)
  double attn_flops = 0;    // sparse attention + indexer scoring
  double bytes() const { return weight_bytes + state_bytes; }
  double flops() const { return gemm_flops + attn_flops; }
};

// One decode step: `batch` sequences, each `context` tokens long before the step, one new
// token each, logits of every sequence.
StepCost DecodeStepCost(const io::ModelConfig& config, int64_t batch, int64_t context);

// A prefill of `prompt` tokens of one sequence from an empty state (logits of the last token).
StepCost PrefillCost(const io::ModelConfig& config, int64_t prompt);

// Expected distinct experts per layer for `tokens` tokens each picking k of E uniformly.
double ExpectedDistinctExperts(int64_t n_experts, int64_t k, int64_t tokens);

// Stored bytes of one routed expert (w1, w2, w3 in MXFP4).
double ExpertBytes(const io::ModelConfig& config);

}  // namespace deepinfer::bench

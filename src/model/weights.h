// The V4.1 text-backbone weights as views into the memory-mapped checkpoint
// (model.md §4.2), plus fp32 copies (in backend memory) of the small vectors the ops read
// directly (norm weights, biases, mHC parameters, sinks).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "base/statusor.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/backend.h"
#include "model/device_array.h"

namespace deepinfer::model {

struct HcSite {
  DeviceFloats fn, scale, base;
  HcSiteWeights view() const { return {fn.data(), scale.data(), base.data()}; }
};

struct AttentionWeights {
  WeightRef wq_a, wq_b, wkv, wo_a, wo_b;
  DeviceFloats q_norm, kv_norm, sinks;
  // KV sources only.
  WeightRef comp_wkv, comp_wgate;  // wgate only when ratio > 1
  DeviceFloats comp_norm;
  // Index sources only (wk / k_norm only on index sources that are also KV sources).
  WeightRef idx_wq_b, idx_weights_proj, idx_wk;
  DeviceFloats idx_k_norm;
};

struct MoeWeights {
  WeightRef gate;  // router [E, D]
  DeviceFloats bias;
  std::vector<ExpertWeights> experts;
  ExpertWeights shared;
};

struct EngramWeights {
  WeightRef table;                  // [rows, head_dim] fp8 rows + per-32 scales
  WeightRef wkv;                    // [(hc+1)*D, columns*head_dim]
  DeviceFloats q_weight, k_weight;  // [hc, D]
};

struct LayerWeights {
  DeviceFloats attn_norm, ffn_norm;
  HcSite hc_attn, hc_ffn;
  AttentionWeights attn;
  MoeWeights ffn;
  std::optional<EngramWeights> engram;
};

struct ModelWeights {
  WeightRef embed, head;
  DeviceFloats norm;
  std::vector<LayerWeights> layers;
};

// Binds every tensor the config calls for, checking dtype and shape; errors name the
// tensor. Logs progress while binding large checkpoints. `checkpoint` must outlive the
// result (the WeightRefs point into its mapping).
base::StatusOr<std::unique_ptr<ModelWeights>> BindWeights(const io::Checkpoint& checkpoint,
                                                          const io::ModelConfig& config,
                                                          Backend* backend);

}  // namespace deepinfer::model

// The MoE feed-forward (model.md §2.7), shaped route -> dispatch -> grouped experts ->
// combine so that expert parallelism (all-to-all between ranks) can replace the local
// dispatcher without touching the model code.
#pragma once

#include <cstdint>
#include <vector>

#include "model/backend.h"
#include "model/device_array.h"
#include "model/weights.h"

namespace deepinfer::model {

// Router decisions for T tokens (host memory).
struct Routing {
  int64_t tokens = 0;
  int64_t k = 0;
  std::vector<int32_t> experts;  // [T, k]
  std::vector<float> weights;    // [T, k] routing weights (already scaled)
};

// The tokens one expert processes: inputs, per-row routing weight, outputs.
struct ExpertBatch {
  int expert = -1;
  std::vector<int32_t> token_rows;  // row of each input in the layer input (host)
  DeviceFloats x;                   // [n, D]
  DeviceFloats weight;              // [n]
  DeviceFloats out;                 // [n, D]
};

// Moves token rows to the experts that will process them and the results back.
class ExpertDispatcher {
 public:
  virtual ~ExpertDispatcher() = default;
  // Builds one batch per expert handled here that received at least one token.
  virtual void Dispatch(const float* v, int64_t D, const Routing& routing,
                        std::vector<ExpertBatch>* batches) = 0;
  // y[T, D] += sum over batches of each output row at its token row.
  virtual void Combine(std::vector<ExpertBatch>& batches, int64_t D, float* y) = 0;
  // True if every expert is on this process (the backend may then run them fused).
  virtual bool local() const { return false; }
};

// Single-process dispatcher: all experts are local.
class LocalExpertDispatcher final : public ExpertDispatcher {
 public:
  explicit LocalExpertDispatcher(Backend* backend) : backend_(backend) {}
  void Dispatch(const float* v, int64_t D, const Routing& routing,
                std::vector<ExpertBatch>* batches) override;
  void Combine(std::vector<ExpertBatch>& batches, int64_t D, float* y) override;
  bool local() const override { return true; }

 private:
  Backend* backend_;
};

struct MoeOptions {
  int64_t top_k = 0;
  bool renormalise = true;
  float routed_scale = 1.0f;
  float swiglu_limit = 0.0f;
  float gate_temp = 1.0f;  // router logits are divided by it
};

class MoeLayer {
 public:
  MoeLayer(Backend* backend, ExpertDispatcher* dispatcher, MoeOptions options)
      : backend_(backend), dispatcher_(dispatcher), opt_(options) {}
  // y [T, D] = routed experts + shared expert of v [T, D] (the ffn_norm output).
  void Forward(const MoeWeights& w, const float* v, int64_t T, int64_t D, float* y);

  Routing Route(const MoeWeights& w, const float* v, int64_t T, int64_t D);
  // The router on the device: experts / weights [T, top_k] in backend memory.
  void RouteOnDevice(const MoeWeights& w, const float* v, int64_t T, int64_t D, DeviceInts* experts,
                     DeviceFloats* weights);
  // Routes on the device and runs Backend::RoutedExperts into y; false if the backend has
  // no fused path (y untouched).
  bool ForwardFused(const MoeWeights& w, const float* v, int64_t T, int64_t D, float* y);
  // Runs each batch through its expert's clamped SwiGLU (weight applied before w2).
  void RunExperts(const MoeWeights& w, std::vector<ExpertBatch>& batches, int64_t D);

 private:
  void Ffn(const ExpertWeights& e, const float* x, int64_t n, const float* row_scale, float* out,
           bool accumulate);

  Backend* backend_;
  ExpertDispatcher* dispatcher_;
  MoeOptions opt_;
};

}  // namespace deepinfer::model

#include "model/moe.h"

#include <map>

#include "base/check.h"

namespace deepinfer::model {

void LocalExpertDispatcher::Dispatch(const float* v, int64_t D, const Routing& routing,
                                     std::vector<ExpertBatch>* batches) {
  std::map<int, std::pair<std::vector<int32_t>, std::vector<float>>> by_expert;
  for (int64_t t = 0; t < routing.tokens; ++t) {
    for (int64_t i = 0; i < routing.k; ++i) {
      auto& [rows, weights] = by_expert[routing.experts[t * routing.k + i]];
      rows.push_back(static_cast<int32_t>(t));
      weights.push_back(routing.weights[t * routing.k + i]);
    }
  }
  batches->clear();
  for (auto& [expert, rw] : by_expert) {
    ExpertBatch b;
    b.expert = expert;
    b.token_rows = std::move(rw.first);
    const int64_t n = static_cast<int64_t>(b.token_rows.size());
    b.x = DeviceFloats(backend_, n * D);
    b.weight = DeviceFloats(backend_, n);
    b.out = DeviceFloats(backend_, n * D);
    backend_->GatherTokenRows(v, D, b.token_rows.data(), n, D, b.x.data());
    backend_->CopyToDevice(b.weight.data(), rw.second.data(), n * sizeof(float));
    batches->push_back(std::move(b));
  }
}

void LocalExpertDispatcher::Combine(std::vector<ExpertBatch>& batches, int64_t D, float* y) {
  for (ExpertBatch& b : batches) {
    backend_->ScatterAddRows(b.out.data(), static_cast<int64_t>(b.token_rows.size()), D,
                             b.token_rows.data(), y, D);
  }
}

void MoeLayer::RouteOnDevice(const MoeWeights& w, const float* v, int64_t T, int64_t D,
                             DeviceInts* experts, DeviceFloats* weights) {
  const int64_t E = w.gate.rows;
  CHECK_EQ(w.gate.cols, D);
  DeviceFloats logits(backend_, T * E);
  backend_->Linear(v, T, D, w.gate, 0, E, logits.data(), E, false);
  if (opt_.gate_temp != 1.0f) backend_->Scale(logits.data(), T * E, 1.0f / opt_.gate_temp);
  *experts = DeviceInts(backend_, T * opt_.top_k);
  *weights = DeviceFloats(backend_, T * opt_.top_k);
  backend_->RouteSqrtSoftplus(logits.data(), w.bias.data(), T, E, opt_.top_k, opt_.renormalise,
                              opt_.routed_scale, experts->data(), weights->data());
}

Routing MoeLayer::Route(const MoeWeights& w, const float* v, int64_t T, int64_t D) {
  DeviceInts experts;
  DeviceFloats weights;
  RouteOnDevice(w, v, T, D, &experts, &weights);
  Routing r;
  r.tokens = T;
  r.k = opt_.top_k;
  r.experts.resize(T * r.k);
  r.weights.resize(T * r.k);
  backend_->CopyToHost(r.experts.data(), experts.data(), T * r.k * sizeof(int32_t));
  backend_->CopyToHost(r.weights.data(), weights.data(), T * r.k * sizeof(float));
  return r;
}

void MoeLayer::Ffn(const ExpertWeights& e, const float* x, int64_t n, const float* row_scale,
                   float* out, bool accumulate) {
  const int64_t I = e.w1.rows, D = e.w1.cols;
  DeviceFloats gate(backend_, n * I), up(backend_, n * I), h(backend_, n * I);
  const LinearOut gate_up[] = {{&e.w1, 0, I, gate.data(), I, false},
                               {&e.w3, 0, I, up.data(), I, false}};
  backend_->LinearMany(x, n, D, gate_up, 2);
  backend_->SwiGlu(gate.data(), up.data(), n, I, opt_.swiglu_limit, row_scale, h.data());
  backend_->Linear(h.data(), n, I, e.w2, 0, D, out, D, accumulate);
}

void MoeLayer::RunExperts(const MoeWeights& w, std::vector<ExpertBatch>& batches, int64_t /*D*/) {
  for (ExpertBatch& b : batches) {
    CHECK(b.expert >= 0 && b.expert < static_cast<int>(w.experts.size()));
    Ffn(w.experts[b.expert], b.x.data(), static_cast<int64_t>(b.token_rows.size()), b.weight.data(),
        b.out.data(), false);
  }
}

bool MoeLayer::ForwardFused(const MoeWeights& w, const float* v, int64_t T, int64_t D, float* y) {
  if (w.experts.empty() || !backend_->CanFuseRoutedExperts(T, w.experts[0])) return false;
  DeviceInts experts;
  DeviceFloats weights;
  RouteOnDevice(w, v, T, D, &experts, &weights);
  RoutedExpertsArgs args;
  args.x = v;
  args.T = T;
  args.D = D;
  args.experts = experts.data();
  args.weights = weights.data();
  args.k = opt_.top_k;
  args.table = w.experts.data();
  args.n_experts = static_cast<int64_t>(w.experts.size());
  args.swiglu_limit = opt_.swiglu_limit;
  args.y = y;
  backend_->RoutedExperts(args);
  return true;
}

void MoeLayer::Forward(const MoeWeights& w, const float* v, int64_t T, int64_t D, float* y) {
  if (dispatcher_->local() && !w.experts.empty() &&
      backend_->CanFuseRoutedExperts(T, w.experts[0])) {
    // The shared expert as a side branch (Backend::BeginSideBranch) into its own buffer,
    // concurrent with the routing and the routed experts, then y = routed + shared: for a
    // Linear that adds its finished sum to y (the CPU's, the FP8 paths') the same bits as
    // accumulating the shared expert's last Linear into y.
    DeviceFloats shared(backend_, T * D);
    backend_->BeginSideBranch(T);
    Ffn(w.shared, v, T, nullptr, shared.data(), /*accumulate=*/false);
    backend_->EndSideBranch();
    CHECK(ForwardFused(w, v, T, D, y));
    backend_->JoinSideBranch();
    backend_->Add(y, shared.data(), T * D, y);
    return;
  }
  const Routing routing = Route(w, v, T, D);
  std::vector<ExpertBatch> batches;
  dispatcher_->Dispatch(v, D, routing, &batches);
  RunExperts(w, batches, D);
  backend_->Fill(y, T * D, 0.0f);
  dispatcher_->Combine(batches, D, y);
  Ffn(w.shared, v, T, nullptr, y, /*accumulate=*/true);
}

}  // namespace deepinfer::model

// CudaBackend: fused routed experts (decode) and the cached per-layer expert tables.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_moe.h"
#include "backend/cuda/kernels_moe_block128.h"
#include "base/check.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace {

using kernels::Aligned16;

// A device-resident pointer (used in place by the WeightCache) that is not 16-byte aligned
// cannot feed the kernels; host pointers are uploaded to aligned memory.
bool UsableInPlace(const void* p) {
  if (Aligned16(p)) return true;
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, p) != cudaSuccess) {
    cudaGetLastError();
    return true;  // plain host memory
  }
  return attributes.type != cudaMemoryTypeDevice && attributes.type != cudaMemoryTypeManaged;
}

// Shape and formats of one expert: w1, w3 [I, D] in one format, w2 [D, I].
bool ExpertShapeOk(const model::ExpertWeights& e) {
  return e.w1.valid() && e.w2.valid() && e.w3.valid() && e.w1.format == e.w3.format &&
         e.w1.rows == e.w3.rows && e.w1.cols == e.w3.cols && e.w2.rows == e.w1.cols &&
         e.w2.cols == e.w1.rows;
}

bool SameShape(const model::ExpertWeights& a, const model::ExpertWeights& b) {
  auto same = [](const model::WeightRef& x, const model::WeightRef& y) {
    return x.format == y.format && x.rows == y.rows && x.cols == y.cols;
  };
  return same(a.w1, b.w1) && same(a.w2, b.w2) && same(a.w3, b.w3);
}

// Which routed-experts kernels a call uses. DEEPINFER_CUDA_GROUPED_MOE=0 forces the
// token-slot-major kernels of k_moe.cu, =1 the grouped ones of k_moe_grouped.cu whenever they
// apply (any T); unset (or another value), the grouped ones run from
// kernels::kGroupedExpertsMinTokens tokens. Read on every call (cheap next to the kernels),
// so that tests and benchmarks can switch it.
std::string GroupedMode() {
  const char* env = std::getenv("DEEPINFER_CUDA_GROUPED_MOE");
  return env != nullptr ? env : "";
}

bool GroupedAllowed() { return GroupedMode() != "0"; }

bool UseGroupedExperts(const kernels::RoutedExpertsLaunch& l) {
  const std::string mode = GroupedMode();
  if (mode == "0") return false;
  if (!kernels::RoutedExpertsGroupedApplicable(l.up_format, l.down_format, l.D, l.I, l.T, l.k,
                                               l.n_experts)) {
    return false;
  }
  return mode == "1" || l.T >= kernels::kGroupedExpertsMinTokens;
}

}  // namespace

bool CudaBackend::CanFuseRoutedExperts(int64_t T, const model::ExpertWeights& e) const {
  if (!fused_experts_ || !ExpertShapeOk(e)) return false;
  const int64_t I = e.w1.rows, D = e.w1.cols;
  if (fp8_activations_ &&
      kernels::RoutedExpertsFp8Applicable(e.w1.format, e.w2.format, D, I, T, 1, 1)) {
    return UsableInPlace(e.w1.data) && UsableInPlace(e.w2.data) && UsableInPlace(e.w3.data);
  }
  // Batch-invariant mode runs larger T as slices of the grouped kernels' maximum.
  if (batch_invariant_) T = std::min(T, kernels::kMaxGroupedExpertTokens);
  // k is not known here; 1 stands for "some valid k" (RoutedExperts checks the real one).
  // Above the token-slot kernels' limit only the grouped ones run (assuming k <= 16).
  const bool fits = T <= kernels::kMaxFusedExpertTokens
                        ? kernels::RoutedExpertsApplicable(e.w1.format, e.w2.format, D, I, T, 1)
                        : GroupedAllowed() && kernels::RoutedExpertsGroupedApplicable(
                                                  e.w1.format, e.w2.format, D, I, T,
                                                  kernels::kGroupedAssumedMaxSlots, 1);
  if (!fits) return false;
  return UsableInPlace(e.w1.data) && UsableInPlace(e.w2.data) && UsableInPlace(e.w3.data);
}

void CudaBackend::ForgetWeights() {
  FreeExpertTables();
  weights_.Clear();
}

void CudaBackend::FreeExpertTables() {
  if (expert_tables_.empty()) return;
  cudaSetDevice(device_);
  FlushTape();
  if (stream_) cudaStreamSynchronize(stream_);  // no kernel still reads a table
  for (auto& [key, table] : expert_tables_) FreeExpertTable(table);
  expert_tables_.clear();
}

void CudaBackend::FreeExpertTable(ExpertTable& table) {
  cudaFree(table.device);
  if (table.block128 != nullptr) cudaFree(table.block128);
  if (table.row_smax != nullptr) cudaFree(table.row_smax);
  table.device = nullptr;
  table.block128 = nullptr;
  table.row_smax = nullptr;
}

base::StatusOr<void*> CudaBackend::UploadTable(const void* host, size_t bytes, const char* what) {
  FlushTape();  // the upload below is enqueued directly (and waited for)
  void* device = nullptr;
  cudaError_t err = cudaMalloc(&device, bytes);
  if (err == cudaSuccess) {
    err = cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, stream_);
  }
  if (err == cudaSuccess) err = cudaStreamSynchronize(stream_);  // the host copy may die after
  if (err != cudaSuccess) {
    cudaGetLastError();
    if (device != nullptr) cudaFree(device);
    return base::ResourceExhaustedError(std::string("RoutedExperts: ") + what +
                                        " upload: " + cudaGetErrorString(err));
  }
  return device;
}

base::StatusOr<CudaBackend::ExpertTable> CudaBackend::BuildExpertTable(
    const model::RoutedExpertsArgs& a) {
  const model::ExpertWeights& first = a.table[0];
  ExpertTable table;
  table.n_experts = a.n_experts;
  table.first_w1 = first.w1.data;
  table.last_w2 = a.table[a.n_experts - 1].w2.data;
  table.up_format = first.w1.format;
  table.down_format = first.w2.format;
  table.I = first.w1.rows;
  table.D = first.w1.cols;
  std::vector<kernels::ExpertPointers> host(static_cast<size_t>(a.n_experts));
  for (int64_t e = 0; e < a.n_experts; ++e) {
    const model::ExpertWeights& ew = a.table[e];
    if (!ExpertShapeOk(ew) || !SameShape(ew, first)) {
      return base::InvalidArgumentError("RoutedExperts: expert " + std::to_string(e) + " (" +
                                        ew.w1.name + ") differs in shape or format from expert 0");
    }
    const model::WeightRef* refs[3] = {&ew.w1, &ew.w2, &ew.w3};
    for (int m = 0; m < 3; ++m) {
      DI_ASSIGN_OR_RETURN(const kernels::DeviceWeight dw, weights_.Get(*refs[m]));
      if (!Aligned16(dw.data)) {
        return base::UnimplementedError("RoutedExperts: " + refs[m]->name +
                                        " is device memory not aligned to 16 bytes");
      }
      host[e].data[m] = dw.data;
      host[e].scale[m] = dw.scale;
      table.scales_aligned4 &= reinterpret_cast<uintptr_t>(dw.scale) % 4 == 0;
    }
  }
  DI_ASSIGN_OR_RETURN(void* device,
                      UploadTable(host.data(), host.size() * sizeof(host[0]), "expert table"));
  table.device = static_cast<kernels::ExpertPointers*>(device);
  return table;
}

CudaBackend::ExpertTable* CudaBackend::ExpertTableFor(const model::RoutedExpertsArgs& a) {
  const model::ExpertWeights& first = a.table[0];
  auto it = expert_tables_.find(a.table);
  if (it != expert_tables_.end()) {
    ExpertTable& t = it->second;
    if (t.n_experts == a.n_experts && t.first_w1 == first.w1.data &&
        t.last_w2 == a.table[a.n_experts - 1].w2.data && t.up_format == first.w1.format &&
        t.down_format == first.w2.format && t.I == first.w1.rows && t.D == first.w1.cols) {
      return &t;
    }
    // Another table now lives at this address: rebuild.
    FlushTape();
    if (!Check(cudaStreamSynchronize(stream_), "RoutedExperts table refresh")) return nullptr;
    FreeExpertTable(it->second);
    expert_tables_.erase(it);
  }
  base::StatusOr<ExpertTable> built = BuildExpertTable(a);
  if (!built.ok()) {
    Fail(built.status());
    return nullptr;
  }
  return &expert_tables_.emplace(a.table, *built).first->second;
}

void CudaBackend::RoutedExperts(const model::RoutedExpertsArgs& a) {
  CHECK(a.table != nullptr && a.n_experts > 0) << "RoutedExperts: empty expert table";
  if (a.T <= 0 || !Usable()) return;
  const model::ExpertWeights& first = a.table[0];
  const int64_t slice =
      std::max<int64_t>(1, kernels::kMaxGroupedExpertPairs / std::max<int64_t>(a.k, 1));
  if (batch_invariant_ && !fp8_activations_ &&
      a.T > std::min(kernels::kMaxGroupedExpertTokens, slice)) {
    // Slices the grouped kernels take whole: each token's result is that of its slice alone.
    const int64_t step = std::min(kernels::kMaxGroupedExpertTokens, slice);
    for (int64_t t = 0; t < a.T && Usable(); t += step) {
      model::RoutedExpertsArgs part = a;
      part.T = std::min(step, a.T - t);
      part.x = a.x + t * a.D;
      part.experts = a.experts + t * a.k;
      part.weights = a.weights + t * a.k;
      part.y = a.y + t * a.D;
      RoutedExperts(part);
    }
    return;
  }
  if (fp8_activations_ &&
      kernels::RoutedExpertsFp8Applicable(first.w1.format, first.w2.format, a.D, first.w1.rows, a.T,
                                          a.k, a.n_experts)) {
    ExpertTable* table = ExpertTableFor(a);
    if (table == nullptr) return;
    if (table->scales_aligned4 && table->D == a.D) return RoutedExpertsFp8(a, *table);
  }
  const bool token_slot_ok = kernels::RoutedExpertsApplicable(first.w1.format, first.w2.format, a.D,
                                                              first.w1.rows, a.T, a.k);
  const bool grouped_ok = GroupedAllowed() && kernels::RoutedExpertsGroupedApplicable(
                                                  first.w1.format, first.w2.format, a.D,
                                                  first.w1.rows, a.T, a.k, a.n_experts);
  if (!CanFuseRoutedExperts(a.T, first) || first.w1.cols != a.D || !(token_slot_ok || grouped_ok)) {
    return Fail(base::UnimplementedError(
        "CudaBackend::RoutedExperts: T " + std::to_string(a.T) + ", k " + std::to_string(a.k) +
        ", D " + std::to_string(a.D) + ", expert " + first.w1.name + " (" +
        std::string(model::WeightFormatName(first.w1.format)) + " " +
        std::to_string(first.w1.rows) + "x" + std::to_string(first.w1.cols) + ") is not fusable"));
  }
  const ExpertTable* table = ExpertTableFor(a);
  if (table == nullptr) return;
  const kernels::RoutedExpertsLaunch launch = ExpertsLaunch(a, *table);
  if (UseGroupedExperts(launch)) {
    void* scratch = TempBytes(static_cast<size_t>(
        kernels::RoutedExpertsGroupedScratchBytes(a.T, a.k, a.D, table->I, a.n_experts)));
    if (scratch == nullptr) return;
    Check(kernels::RoutedExpertsGrouped(launch, scratch, stream_), "RoutedExperts (grouped)");
  } else {
    auto* h = static_cast<float*>(
        TempBytes(kernels::RoutedExpertsScratchFloats(a.T, a.k, table->I) * sizeof(float)));
    if (h == nullptr) return;
    Check(kernels::RoutedExperts(launch, h, stream_), "RoutedExperts");
  }
  Done("RoutedExperts");
}

kernels::RoutedExpertsLaunch CudaBackend::ExpertsLaunch(const model::RoutedExpertsArgs& a,
                                                        const ExpertTable& table) const {
  kernels::RoutedExpertsLaunch launch;
  launch.table = table.device;
  launch.n_experts = a.n_experts;
  launch.up_format = table.up_format;
  launch.down_format = table.down_format;
  launch.D = a.D;
  launch.I = table.I;
  launch.x = a.x;
  launch.T = a.T;
  launch.experts = a.experts;
  launch.weights = a.weights;
  launch.k = a.k;
  launch.swiglu_limit = a.swiglu_limit;
  launch.y = a.y;
  launch.error_word = error_word_;
  return launch;
}

bool CudaBackend::Block128Eligible(const model::RoutedExpertsArgs& a,
                                   const ExpertTable& table) const {
  return !batch_invariant_ && table.up_format == model::WeightFormat::kMxFp4 &&
         table.down_format == model::WeightFormat::kMxFp4 && table.scales_aligned4 &&
         kernels::Aligned16(a.x);
}

void CudaBackend::RunRoutedExpertsBlock128(const model::RoutedExpertsArgs& a,
                                           const ExpertTable& table, int item_pairs,
                                           const kernels::ExpertBlock128Pointers* copies,
                                           const uint8_t* row_smax, const char* what) {
  void* scratch = TempBytes(static_cast<size_t>(
      kernels::RoutedExpertsBlock128ScratchBytes(a.T, a.k, a.D, table.I, a.n_experts, item_pairs)));
  if (scratch == nullptr) return;
  Check(kernels::RoutedExpertsBlock128(ExpertsLaunch(a, table), item_pairs, copies, row_smax,
                                       scratch, stream_),
        what);
  Done("RoutedExperts");
}

void CudaBackend::RoutedExpertsFp8(const model::RoutedExpertsArgs& a, ExpertTable& table) {
  if (Block128Eligible(a, table) &&
      kernels::RoutedExpertsBlock128Applicable(a.D, table.I, a.T, a.k, a.n_experts)) {
    const kernels::ExpertBlock128Pointers* copies = nullptr;
    if (experts_block128_copy_budget_ > 0 && !table.block128_refused) {
      copies = ExpertBlock128TableFor(a, table);
      if (!Usable()) return;
    }
    if (copies != nullptr || experts_block128_) {
      const uint8_t* row_smax = copies == nullptr ? ExpertRowScaleMaxFor(table) : nullptr;
      return RunRoutedExpertsBlock128(
          a, table, kernels::RoutedExpertsBlock128ItemPairs(a.T, a.k, a.n_experts), copies,
          row_smax, "RoutedExperts (block-128 FP8)");
    }
  }
  // Unless set_experts_decode_e4m3(false): decode sizes on the e4m3 streaming GEMM, with the
  // table's cached row scales only (made per call they would read every expert's scale bytes).
  if (experts_decode_e4m3_ && Block128Eligible(a, table) &&
      kernels::RoutedExpertsBlock128DecodeApplicable(a.D, table.I, a.T, a.k, a.n_experts)) {
    const uint8_t* row_smax = ExpertRowScaleMaxFor(table);
    if (!Usable()) return;
    if (row_smax != nullptr) {
      return RunRoutedExpertsBlock128(a, table, kernels::kBlock128DecodeItemPairs, nullptr,
                                      row_smax, "RoutedExperts (block-128 FP8, decode items)");
    }
  }
  const kernels::RoutedExpertsLaunch launch = ExpertsLaunch(a, table);
  if (!batch_invariant_ && experts_bf16_min_tokens_ > 0 && a.T >= experts_bf16_min_tokens_ &&
      kernels::RoutedExpertsBf16Applicable(table.up_format, table.down_format, a.D, table.I, a.T,
                                           a.k, a.n_experts)) {
    void* scratch = TempBytes(static_cast<size_t>(
        kernels::RoutedExpertsBf16ScratchBytes(a.T, a.k, a.D, table.I, a.n_experts)));
    if (scratch == nullptr) return;
    Check(kernels::RoutedExpertsBf16(launch, scratch, stream_), "RoutedExperts (bf16)");
    return Done("RoutedExperts");
  }
  void* scratch = TempBytes(static_cast<size_t>(
      kernels::RoutedExpertsFp8ScratchBytes(a.T, a.k, a.D, table.I, a.n_experts)));
  if (scratch == nullptr) return;
  Check(kernels::RoutedExpertsFp8(launch, scratch, stream_), "RoutedExperts (fp8)");
  Done("RoutedExperts");
}

bool CudaBackend::ExpertBlock128CopiesFit(const model::RoutedExpertsArgs& a,
                                          const ExpertTable& table) {
  // All of the layer's copies or none: a layer that could only be partly copied would hold
  // copies it never uses.
  const int64_t layer = a.n_experts * (2 * kernels::Block128WeightBytes(table.I, table.D) +
                                       kernels::Block128WeightBytes(table.D, table.I));
  size_t free_bytes = 0, total_bytes = 0;
  if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  const auto bytes = static_cast<size_t>(layer);
  if (experts_block128_copy_bytes() + bytes <= experts_block128_copy_budget_ &&
      free_bytes >= bytes + kFp8Bf16CopyKeepFree) {
    return true;
  }
  LOG_WARN(
      "RoutedExperts: no block-128 copies of {} ({:.1f} GiB; budget {:.1f} GiB, {:.1f} GiB "
      "made, {:.1f} GiB free); its layer keeps the register path",
      a.table[0].w1.name, bytes / double(1 << 30), experts_block128_copy_budget_ / double(1 << 30),
      experts_block128_copy_bytes() / double(1 << 30), free_bytes / double(1 << 30));
  return false;
}

const void* CudaBackend::ExpertBlock128CopyOf(const model::WeightRef& ref) {
  base::StatusOr<kernels::DeviceWeight> dw = weights_.Get(ref);
  if (!dw.ok()) {
    Fail(dw.status());
    return nullptr;
  }
  if (!kernels::ExpertBlock128Convertible(*dw)) return nullptr;
  return weights_.DerivedCopy(*dw, WeightCache::CopyKind::kExpertBlock128,
                              static_cast<size_t>(kernels::Block128WeightBytes(dw->rows, dw->cols)),
                              experts_block128_copy_budget_, kFp8Bf16CopyKeepFree,
                              [this](const kernels::DeviceWeight& view, void* out) {
                                return kernels::RequantMxFp4Block128(view, out, stream_);
                              });
}

const uint8_t* CudaBackend::ExpertRowScaleMaxFor(ExpertTable& table) {
  if (table.row_smax != nullptr || table.row_smax_refused) return table.row_smax;
  const auto bytes =
      static_cast<size_t>(table.n_experts * kernels::ExpertRowScaleMaxStride(table.D, table.I));
  void* device = nullptr;
  cudaError_t err = cudaMalloc(&device, bytes);
  if (err == cudaSuccess) {
    err = kernels::ExpertRowScaleMax(table.device, table.n_experts, table.D, table.I,
                                     static_cast<uint8_t*>(device), stream_);
  }
  if (err != cudaSuccess) {
    // Not fatal: RoutedExpertsBlock128 then makes the row scales in its scratch at every call.
    cudaGetLastError();
    if (device != nullptr) cudaFree(device);
    table.row_smax_refused = true;
    LOG_WARN("RoutedExperts: no kept row scales ({} bytes: {}); they are made at every call", bytes,
             cudaGetErrorString(err));
    return nullptr;
  }
  table.row_smax = static_cast<uint8_t*>(device);
  return table.row_smax;
}

const kernels::ExpertBlock128Pointers* CudaBackend::ExpertBlock128TableFor(
    const model::RoutedExpertsArgs& a, ExpertTable& table) {
  if (table.block128 != nullptr) return table.block128;
  if (table.block128_refused) return nullptr;
  table.block128_refused = true;  // until every copy is made and the table uploaded
  if (!ExpertBlock128CopiesFit(a, table)) return nullptr;
  std::vector<kernels::ExpertBlock128Pointers> host(static_cast<size_t>(a.n_experts));
  for (int64_t e = 0; e < a.n_experts; ++e) {
    const model::ExpertWeights& ew = a.table[e];
    const model::WeightRef* refs[3] = {&ew.w1, &ew.w2, &ew.w3};
    for (int m = 0; m < 3; ++m) {
      const void* copy = ExpertBlock128CopyOf(*refs[m]);
      if (copy == nullptr) return nullptr;  // (a failure is recorded; else the layer keeps MXFP4)
      const kernels::Block128Weight view =
          kernels::Block128WeightAt(copy, refs[m]->rows, refs[m]->cols);
      host[e].data[m] = view.data;
      host[e].scale[m] = view.scale;
    }
  }
  base::StatusOr<void*> device =
      UploadTable(host.data(), host.size() * sizeof(host[0]), "block-128 table");
  if (!device.ok()) {
    Fail(device.status());
    return nullptr;
  }
  table.block128 = static_cast<kernels::ExpertBlock128Pointers*>(*device);
  table.block128_refused = false;
  return table.block128;
}

}  // namespace deepinfer::backend::cuda

// Creating a compute backend by name, so that commands and the engine can pick one at run
// time ("cpu", "cuda", "cuda:N") without knowing which backends this build holds.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"
#include "model/backend.h"

namespace deepinfer::backend {

// Numerics switches of a backend (the CPU reference is batch-invariant and exact already).
struct BackendOptions {
  // Every token's results bitwise independent of the batch and chunk it runs in (the CUDA
  // backend then never picks a kernel by token count: no one-row GEMV, token slices of the
  // tensor-core paths; slower at batch 1).
  bool batch_invariant = false;
  // GEMM activations quantised to FP8 like DeepSeek's kernels (CUDA only; a documented
  // deviation from the goldens, model.md §2.8).
  bool fp8_activations = false;
  // With fp8_activations: GiB of e4m3 block-128 copies of the MXFP4 experts that prefill may
  // keep (the FP8 tensor-core expert GEMMs; twice the expert bytes again). Negative: the
  // backend's default (CUDA: 0, or DEEPINFER_EXPERTS_FP8_COPY_GIB). Only cuda takes a value > 0.
  double fp8_expert_copy_gib = -1.0;
};

// "cpu" -> the fp32 reference backend; "cuda" / "cuda:N" -> the Hopper backend on device N
// (default 0). InvalidArgument for an unknown name or for fp8_activations on the CPU;
// Unavailable when the build has no CUDA backend or no usable device; FailedPrecondition for
// a device this build cannot run on.
base::StatusOr<std::unique_ptr<model::Backend>> CreateBackend(std::string_view name,
                                                              const BackendOptions& options = {});

// Whether `name` is "cuda" or "cuda:N" (N >= 0), whether or not this build or machine has it.
bool IsCudaBackendName(std::string_view name);

// Backend names this build can create on this machine right now ("cpu" always).
std::vector<std::string> AvailableBackends();

}  // namespace deepinfer::backend

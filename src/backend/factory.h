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

// "cpu" -> the fp32 reference backend; "cuda" / "cuda:N" -> the Hopper backend on device N
// (default 0). InvalidArgument for an unknown name; Unavailable when the build has no CUDA
// backend or no usable device; FailedPrecondition for a device this build cannot run on.
base::StatusOr<std::unique_ptr<model::Backend>> CreateBackend(std::string_view name);

// Backend names this build can create on this machine right now ("cpu" always).
std::vector<std::string> AvailableBackends();

}  // namespace deepinfer::backend

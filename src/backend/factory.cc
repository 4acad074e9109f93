#include "backend/factory.h"

#include <algorithm>
#include <charconv>
#include <string>

#include "backend/cpu/cpu_backend.h"
#ifdef DEEPINFER_HAVE_CUDA_BACKEND
#include "backend/cuda/cuda_backend.h"
#endif

namespace deepinfer::backend {
namespace {

// Parses "cuda" / "cuda:N" into N; -1 if `name` is not of that form.
int ParseCudaDevice(std::string_view name) {
  if (name == "cuda") return 0;
  constexpr std::string_view kPrefix = "cuda:";
  if (!name.starts_with(kPrefix)) return -1;
  std::string_view digits = name.substr(kPrefix.size());
  int device = -1;
  auto [ptr, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), device);
  if (ec != std::errc() || ptr != digits.data() + digits.size() || device < 0) return -1;
  return device;
}

}  // namespace

bool IsCudaBackendName(std::string_view name) { return ParseCudaDevice(name) >= 0; }

base::StatusOr<std::unique_ptr<model::Backend>> CreateBackend(std::string_view name,
                                                              const BackendOptions& options) {
  if (name == "cpu") {
    if (options.fp8_activations) {
      return base::InvalidArgumentError("FP8 activations need a CUDA backend, not cpu");
    }
    if (options.fp8_expert_copy_gib > 0) {
      return base::InvalidArgumentError("FP8 expert copies need a CUDA backend, not cpu");
    }
    return std::unique_ptr<model::Backend>(new cpu::CpuBackend());
  }
  const int device = ParseCudaDevice(name);
  if (device < 0) {
    return base::InvalidArgumentError("unknown backend '" + std::string(name) +
                                      "' (expected cpu, cuda or cuda:N)");
  }
#ifdef DEEPINFER_HAVE_CUDA_BACKEND
  if (device >= cuda::CudaBackend::DeviceCount()) {
    return base::UnavailableError("backend '" + std::string(name) + "': no such CUDA device (" +
                                  std::to_string(cuda::CudaBackend::DeviceCount()) + " found)");
  }
  DI_ASSIGN_OR_RETURN(auto backend, cuda::CudaBackend::Create(device));
  if (options.batch_invariant) backend->set_batch_invariant(true);
  if (options.fp8_activations) backend->set_fp8_activations(true);
  if (options.fp8_expert_copy_gib >= 0) {
    // Clamped at 1 PiB (a larger or infinite value would overflow the conversion).
    const double gib = std::min(options.fp8_expert_copy_gib, double(1 << 20));
    backend->set_experts_block128_copy_budget(static_cast<size_t>(gib * double(size_t{1} << 30)));
  }
  return std::unique_ptr<model::Backend>(std::move(backend));
#else
  (void)options;
  return base::UnavailableError("backend '" + std::string(name) +
                                "': this build has no CUDA backend (configure with nvcc)");
#endif
}

std::vector<std::string> AvailableBackends() {
  std::vector<std::string> names = {"cpu"};
#ifdef DEEPINFER_HAVE_CUDA_BACKEND
  for (int d = 0; d < cuda::CudaBackend::DeviceCount(); ++d) {
    names.push_back("cuda:" + std::to_string(d));
  }
#endif
  return names;
}

}  // namespace deepinfer::backend

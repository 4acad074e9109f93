// Where a kernel launch goes: to the driver, or to a recorder (StreamTape) that replays the
// launches later, eagerly or as a CUDA graph.
//
// Every kernel of the backend is launched through LaunchKernel (pdl::Launch and the cluster
// launches call it). When this thread's current sink records the launch's stream, the launch
// is handed to the sink with its arguments already converted to the kernel's parameter types
// (as cudaLaunchKernelEx does), plus each parameter's size, so that the sink can copy them.
// Otherwise it is cudaLaunchKernelExC.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

namespace deepinfer::backend::cuda::kernels::launch {

// A launch's parameters: values[i] points at parameter i (sizes[i] bytes, alignment
// aligns[i]); count may be 0.
struct KernelArgs {
  void* const* values = nullptr;
  const size_t* sizes = nullptr;
  const size_t* aligns = nullptr;
  int count = 0;
};

class Sink {
 public:
  virtual ~Sink() = default;
  // The stream whose launches this sink takes.
  virtual cudaStream_t recorded_stream() const = 0;
  // Takes the launch instead of the driver; returns what the launch returns (the sink reports
  // its own errors when it issues the launch).
  virtual cudaError_t RecordKernel(const cudaLaunchConfig_t& config, const void* func,
                                   const KernelArgs& args) = 0;
};

// Sinks are registered per stream (at most one each) and looked up at every launch on the
// stream this thread records, so a sink that is gone (unregistered) is never reached, from
// any thread. The owner registers its sink for its stream, unregisters it before the sink is
// destroyed, and marks the threads that record: CudaBackend sets the recording stream before
// each of its ops and clears it in stream() (work the caller enqueues itself).
void RegisterSink(cudaStream_t stream, Sink* sink);
void UnregisterSink(cudaStream_t stream);
// The stream whose launches this thread hands to that stream's sink (null: none).
void SetRecordingStream(cudaStream_t stream);
cudaStream_t RecordingStream();
// The registered sink of `stream` (null if none).
Sink* RegisteredSink(cudaStream_t stream);

// The sink that takes launches on `stream` from this thread, else null.
inline Sink* SinkFor(cudaStream_t stream) {
  return stream != nullptr && RecordingStream() == stream ? RegisteredSink(stream) : nullptr;
}

// Raises `kernel`'s dynamic shared memory limit (cudaFuncAttributeMaxDynamicSharedMemorySize)
// to at least `bytes` and never lowers it: a recorded launch is issued after its launcher
// returned, possibly after a launch of the same kernel that asked for less (the routed
// experts' up and down GEMMs). Every launcher whose limit can differ between calls goes through
// here (k_mma.cu, k_fp8_gemm.cu and k_moe_fp8.cu set one constant limit once).
cudaError_t RaiseMaxDynamicSmem(const void* kernel, int bytes);
template <typename... Params>
cudaError_t RaiseMaxDynamicSmem(void (*kernel)(Params...), int bytes) {
  return RaiseMaxDynamicSmem(reinterpret_cast<const void*>(kernel), bytes);
}

// Whether a cluster launch of `kernel` with `config` can be scheduled on this device
// (cudaOccupancyMaxActiveClusters > 0); remembered per kernel, cluster size, block size and
// shared memory. For launchers that fall back to no cluster when one cannot be scheduled:
// a recorded launch would only fail when issued.
bool ClusterSchedulable(const void* kernel, const cudaLaunchConfig_t& config);

// cudaOccupancyMaxActiveClusters for `kernel` with `config` (its cluster dimension attribute,
// block size and dynamic shared memory), 0 where it cannot be asked; remembered like
// ClusterSchedulable. For launchers that size their clusters so that all fit in one wave.
int MaxActiveClusters(const void* kernel, const cudaLaunchConfig_t& config);

// kernel<<<config>>>(args...), or handed to this thread's sink when it records config.stream.
template <typename... Params, typename... Args>
cudaError_t LaunchKernel(const cudaLaunchConfig_t& config, void (*kernel)(Params...),
                         Args&&... args) {
  return [&](Params... coerced) -> cudaError_t {
    void* values[sizeof...(Params) + 1] = {const_cast<void*>(static_cast<const void*>(&coerced))...,
                                           nullptr};
    const void* func = reinterpret_cast<const void*>(kernel);
    if (Sink* sink = SinkFor(config.stream)) {
      static constexpr size_t kSizes[] = {sizeof(Params)..., 0};
      static constexpr size_t kAligns[] = {alignof(Params)..., 1};
      return sink->RecordKernel(config, func,
                                KernelArgs{values, kSizes, kAligns, int(sizeof...(Params))});
    }
    return cudaLaunchKernelExC(&config, func, values);
  }(std::forward<Args>(args)...);
}

}  // namespace deepinfer::backend::cuda::kernels::launch

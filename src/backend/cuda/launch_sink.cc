// The launch layer (launch_sink.h): the per-stream sink registry, the thread's recording
// stream, raise-only shared-memory limits, the cluster schedulability check.
#include "backend/cuda/launch_sink.h"

#include <map>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

namespace deepinfer::backend::cuda::kernels::launch {
namespace {

thread_local cudaStream_t recording_stream = nullptr;

std::mutex& RegistryMutex() {
  static std::mutex mu;
  return mu;
}
// (stream, sink) pairs: a handful (one per backend with graphs on).
std::vector<std::pair<cudaStream_t, Sink*>>& Registry() {
  static std::vector<std::pair<cudaStream_t, Sink*>> sinks;
  return sinks;
}

}  // namespace

void RegisterSink(cudaStream_t stream, Sink* sink) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (auto& [s, k] : Registry()) {
    if (s == stream) {
      k = sink;
      return;
    }
  }
  Registry().emplace_back(stream, sink);
}

void UnregisterSink(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  auto& sinks = Registry();
  for (size_t i = 0; i < sinks.size(); ++i) {
    if (sinks[i].first == stream) {
      sinks.erase(sinks.begin() + static_cast<std::ptrdiff_t>(i));
      return;
    }
  }
}

Sink* RegisteredSink(cudaStream_t stream) {
  std::lock_guard<std::mutex> lock(RegistryMutex());
  for (const auto& [s, k] : Registry()) {
    if (s == stream) return k;
  }
  return nullptr;
}

void SetRecordingStream(cudaStream_t stream) { recording_stream = stream; }
cudaStream_t RecordingStream() { return recording_stream; }

cudaError_t RaiseMaxDynamicSmem(const void* kernel, int bytes) {
  int device = 0;
  const cudaError_t got = cudaGetDevice(&device);
  if (got != cudaSuccess) return got;
  static std::mutex mu;
  // The limit each (device, kernel) was raised to.
  static std::map<std::pair<int, const void*>, int> limits;
  std::lock_guard<std::mutex> lock(mu);
  int& limit = limits[{device, kernel}];
  if (bytes <= limit) return cudaSuccess;
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) limit = bytes;
  return e;
}

int MaxActiveClusters(const void* kernel, const cudaLaunchConfig_t& config) {
  unsigned cluster = 1;
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    if (config.attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& c = config.attrs[i].val.clusterDim;
      cluster = c.x * c.y * c.z;
    }
  }
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  using Key = std::tuple<int, const void*, unsigned, unsigned, size_t>;
  static std::mutex mu;
  static std::map<Key, int> known;
  const Key key{device, kernel, cluster, config.blockDim.x, config.dynamicSmemBytes};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int clusters = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (e != cudaSuccess) cudaGetLastError();
  return known[key] = e == cudaSuccess ? clusters : 0;
}

bool ClusterSchedulable(const void* kernel, const cudaLaunchConfig_t& config) {
  return MaxActiveClusters(kernel, config) > 0;
}

}  // namespace deepinfer::backend::cuda::kernels::launch

// StreamTape: recording, flushing (graph or op by op) and the graph cache.
//
// Tape layout: a sequence of ops, each starting at an 8-byte boundary with a uint32 tag.
//   kernel: tag, n_attrs, func (u64), grid xyz, block xyz (u32), smem (u64),
//           n_attrs x {id, three u32 payload words}, n_args (u32),
//           n_args x {size (u32), [16-aligned] value bytes}
//   copy:   tag, kind (u32), dst, src, bytes (u64)
//   memset: tag, value (i32), dst, bytes (u64)
//   call:   tag, key bytes (u32), index into calls_ (u64), key bytes
// Every byte is written explicitly (no struct padding), so equal work gives equal bytes.
// Parameter values start at 16-byte offsets: the tape's storage (operator new) is 16-byte
// aligned, so IssueEager can pass pointers into it to cudaLaunchKernelExC.
#include "backend/cuda/stream_tape.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

#include "base/check.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace kernels::launch {
namespace {
thread_local Sink* current_sink = nullptr;
}  // namespace

Sink* CurrentSink() { return current_sink; }
void SetCurrentSink(Sink* sink) { current_sink = sink; }

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

bool ClusterSchedulable(const void* kernel, const cudaLaunchConfig_t& config) {
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
    return false;
  }
  using Key = std::tuple<int, const void*, unsigned, unsigned, size_t>;
  static std::mutex mu;
  static std::map<Key, bool> known;
  const Key key{device, kernel, cluster, config.blockDim.x, config.dynamicSmemBytes};
  std::lock_guard<std::mutex> lock(mu);
  if (auto it = known.find(key); it != known.end()) return it->second;
  int clusters = 0;
  const cudaError_t e = cudaOccupancyMaxActiveClusters(&clusters, kernel, &config);
  if (e != cudaSuccess) cudaGetLastError();
  return known[key] = e == cudaSuccess && clusters > 0;
}

}  // namespace kernels::launch

namespace {

enum Tag : uint32_t { kKernel = 1, kCopy = 2, kMemset = 3, kCall = 4 };

// Reads the tape back in the order it was written.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& tape) : base_(tape.data()), end_(tape.size()) {}
  bool done() const { return at_ >= end_; }
  template <typename T>
  T Get() {
    T v;
    std::memcpy(&v, base_ + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  const uint8_t* Skip(size_t n) {
    const uint8_t* p = base_ + at_;
    at_ += n;
    return p;
  }
  void Align(size_t a) { at_ = (at_ + a - 1) / a * a; }

 private:
  const uint8_t* base_;
  size_t end_;
  size_t at_ = 0;
};

}  // namespace

StreamTape::~StreamTape() { ForgetGraphs(); }

void StreamTape::ForgetGraphs() {
  for (auto& [hash, cached] : cache_) cudaGraphExecDestroy(cached.exec);
  cache_.clear();
  sightings_.clear();
}

void StreamTape::Put(const void* p, size_t n) {
  const size_t at = tape_.size();
  tape_.resize(at + n);
  std::memcpy(tape_.data() + at, p, n);
}

void StreamTape::PadTo(size_t alignment) {
  tape_.resize((tape_.size() + alignment - 1) / alignment * alignment, 0);
}

cudaError_t StreamTape::RecordKernel(const cudaLaunchConfig_t& config, const void* func,
                                     const kernels::launch::KernelArgs& args) {
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const cudaLaunchAttributeID id = config.attrs[i].id;
    if (id != cudaLaunchAttributeProgrammaticStreamSerialization &&
        id != cudaLaunchAttributeClusterDimension) {
      return cudaErrorNotSupported;
    }
  }
  PadTo(8);
  Put(uint32_t{kKernel});
  Put(static_cast<uint32_t>(config.numAttrs));
  Put(reinterpret_cast<uint64_t>(func));
  const uint32_t shape[6] = {config.gridDim.x,  config.gridDim.y,  config.gridDim.z,
                             config.blockDim.x, config.blockDim.y, config.blockDim.z};
  Put(shape, sizeof(shape));
  Put(static_cast<uint64_t>(config.dynamicSmemBytes));
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const cudaLaunchAttribute& a = config.attrs[i];
    uint32_t words[4] = {static_cast<uint32_t>(a.id), 0, 0, 0};
    if (a.id == cudaLaunchAttributeClusterDimension) {
      words[1] = a.val.clusterDim.x;
      words[2] = a.val.clusterDim.y;
      words[3] = a.val.clusterDim.z;
    } else {
      words[1] = static_cast<uint32_t>(a.val.programmaticStreamSerializationAllowed);
    }
    Put(words, sizeof(words));
  }
  Put(static_cast<uint32_t>(args.count));
  for (int i = 0; i < args.count; ++i) {
    CHECK_LE(args.aligns[i], 16u) << "kernel parameter aligned to more than 16 bytes";
    Put(static_cast<uint32_t>(args.sizes[i]));
    PadTo(16);
    Put(args.values[i], args.sizes[i]);
  }
  ++ops_;
  ++kernels_;
  return cudaSuccess;
}

void StreamTape::RecordCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  PadTo(8);
  Put(uint32_t{kCopy});
  Put(static_cast<uint32_t>(kind));
  Put(reinterpret_cast<uint64_t>(dst));
  Put(reinterpret_cast<uint64_t>(src));
  Put(static_cast<uint64_t>(bytes));
  ++ops_;
}

void StreamTape::RecordMemset(void* dst, int value, size_t bytes) {
  PadTo(8);
  Put(uint32_t{kMemset});
  Put(static_cast<int32_t>(value));
  Put(reinterpret_cast<uint64_t>(dst));
  Put(static_cast<uint64_t>(bytes));
  ++ops_;
}

void StreamTape::RecordCall(const void* key, size_t key_bytes, std::function<cudaError_t()> issue) {
  PadTo(8);
  Put(uint32_t{kCall});
  Put(static_cast<uint32_t>(key_bytes));
  Put(static_cast<uint64_t>(calls_.size()));
  Put(key, key_bytes);
  calls_.push_back(std::move(issue));
  ++ops_;
}

cudaError_t StreamTape::IssueEager() {
  Reader r(tape_);
  std::vector<void*> values;
  while (!r.done()) {
    r.Align(8);
    const uint32_t tag = r.Get<uint32_t>();
    cudaError_t e = cudaSuccess;
    if (tag == kKernel) {
      cudaLaunchConfig_t config = {};
      cudaLaunchAttribute attrs[4] = {};
      config.numAttrs = r.Get<uint32_t>();
      CHECK_LE(config.numAttrs, 4u);
      const void* func = reinterpret_cast<const void*>(r.Get<uint64_t>());
      uint32_t shape[6];
      std::memcpy(shape, r.Skip(sizeof(shape)), sizeof(shape));
      config.gridDim = dim3(shape[0], shape[1], shape[2]);
      config.blockDim = dim3(shape[3], shape[4], shape[5]);
      config.dynamicSmemBytes = r.Get<uint64_t>();
      config.stream = stream_;
      for (unsigned i = 0; i < config.numAttrs; ++i) {
        uint32_t words[4];
        std::memcpy(words, r.Skip(sizeof(words)), sizeof(words));
        attrs[i].id = static_cast<cudaLaunchAttributeID>(words[0]);
        if (attrs[i].id == cudaLaunchAttributeClusterDimension) {
          attrs[i].val.clusterDim.x = words[1];
          attrs[i].val.clusterDim.y = words[2];
          attrs[i].val.clusterDim.z = words[3];
        } else {
          attrs[i].val.programmaticStreamSerializationAllowed = static_cast<int>(words[1]);
        }
      }
      config.attrs = attrs;
      const uint32_t n_args = r.Get<uint32_t>();
      values.assign(n_args + 1, nullptr);
      for (uint32_t i = 0; i < n_args; ++i) {
        const uint32_t size = r.Get<uint32_t>();
        r.Align(16);
        values[i] = const_cast<uint8_t*>(r.Skip(size));
      }
      e = cudaLaunchKernelExC(&config, func, values.data());
      if (e != cudaSuccess) {
        const char* name = nullptr;
        if (cudaFuncGetName(&name, func) != cudaSuccess || name == nullptr) name = "?";
        LOG_ERROR(
            "recorded launch of {} (grid {}x{}x{}, block {}, smem {}, {} attributes) "
            "failed: {}",
            name, shape[0], shape[1], shape[2], shape[3], config.dynamicSmemBytes, config.numAttrs,
            cudaGetErrorString(e));
      }
    } else if (tag == kCopy) {
      const auto kind = static_cast<cudaMemcpyKind>(r.Get<uint32_t>());
      void* dst = reinterpret_cast<void*>(r.Get<uint64_t>());
      const void* src = reinterpret_cast<const void*>(r.Get<uint64_t>());
      e = cudaMemcpyAsync(dst, src, r.Get<uint64_t>(), kind, stream_);
    } else if (tag == kCall) {
      const uint32_t key_bytes = r.Get<uint32_t>();
      const uint64_t index = r.Get<uint64_t>();
      r.Skip(key_bytes);
      CHECK_LT(index, calls_.size()) << "corrupt stream tape";
      e = calls_[index]();
    } else {
      CHECK_EQ(tag, uint32_t{kMemset}) << "corrupt stream tape";
      const int value = r.Get<int32_t>();
      void* dst = reinterpret_cast<void*>(r.Get<uint64_t>());
      e = cudaMemsetAsync(dst, value, r.Get<uint64_t>(), stream_);
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

cudaGraphExec_t StreamTape::Capture(uint64_t hash) {
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  const cudaError_t issued = IssueEager();
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (issued == cudaSuccess && ended == cudaSuccess && graph != nullptr &&
      cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess) {
    exec = nullptr;
  }
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (exec == nullptr) {
    cudaGetLastError();
    return nullptr;
  }
  if (auto it = cache_.find(hash); it != cache_.end()) {  // a hash collision: replace
    cudaGraphExecDestroy(it->second.exec);
    cache_.erase(it);
  }
  if (static_cast<int>(cache_.size()) >= kMaxGraphs) {
    auto oldest = cache_.begin();
    for (auto it = cache_.begin(); it != cache_.end(); ++it) {
      if (it->second.last_use < oldest->second.last_use) oldest = it;
    }
    cudaGraphExecDestroy(oldest->second.exec);
    cache_.erase(oldest);
  }
  cache_[hash] = Cached{tape_, exec, ++clock_};
  return exec;
}

cudaError_t StreamTape::Flush() {
  if (ops_ == 0) return cudaSuccess;
  cudaGraphExec_t exec = nullptr;
  if (graphs_ && kernels_ >= min_graph_kernels_) {
    const uint64_t hash = XXH3_64bits(tape_.data(), tape_.size());
    if (auto it = cache_.find(hash); it != cache_.end() && it->second.tape == tape_) {
      exec = it->second.exec;
      it->second.last_use = ++clock_;
    } else {
      if (debug_) ExplainMiss();
      if (sightings_.size() >= 4096) sightings_.clear();
      if (++sightings_[hash] >= 2) {
        exec = Capture(hash);
        if (exec == nullptr) {
          LOG_WARN("CUDA graph capture failed; issuing launches one by one from now on");
          graphs_ = false;
        } else {
          ++stats_.graph_captures;
        }
      }
    }
  }
  cudaError_t e;
  if (exec != nullptr) {
    e = cudaGraphLaunch(exec, stream_);
    ++stats_.graph_launches;
    stats_.graph_kernels += kernels_;
  } else {
    e = IssueEager();
    ++stats_.eager_flushes;
    stats_.eager_kernels += kernels_;
  }
  Reset();
  return e;
}

namespace {

// Where op `index` of a tape starts, its tag and (kernels) its function and parameter
// offsets; op_end is where the next op starts.
struct OpInfo {
  size_t start = 0, end = 0;
  uint32_t tag = 0;
  const void* func = nullptr;
  std::vector<size_t> params;
};

std::vector<OpInfo> Ops(const std::vector<uint8_t>& tape) {
  std::vector<OpInfo> ops;
  Reader r(tape);
  auto pos = [&](const uint8_t* p) { return static_cast<size_t>(p - tape.data()); };
  while (!r.done()) {
    r.Align(8);
    OpInfo op;
    op.start = pos(r.Skip(0));
    op.tag = r.Get<uint32_t>();
    if (op.tag == kKernel) {
      const uint32_t n_attrs = r.Get<uint32_t>();
      op.func = reinterpret_cast<const void*>(r.Get<uint64_t>());
      r.Skip(24 + 8 + 16 * n_attrs);
      const uint32_t n_args = r.Get<uint32_t>();
      for (uint32_t i = 0; i < n_args; ++i) {
        const uint32_t size = r.Get<uint32_t>();
        r.Align(16);
        op.params.push_back(pos(r.Skip(size)));
      }
    } else if (op.tag == kCall) {
      const uint32_t key_bytes = r.Get<uint32_t>();
      r.Skip(8 + key_bytes);
    } else {
      r.Skip(op.tag == kCopy ? 4 + 24 : 4 + 16);
    }
    op.end = pos(r.Skip(0));
    ops.push_back(op);
  }
  return ops;
}

}  // namespace

void StreamTape::ExplainMiss() {
  if (debug_lines_ < 64 && !recent_.empty()) {
    // The recent tape sharing the longest prefix with this one.
    size_t best = 0, best_prefix = 0;
    for (size_t i = 0; i < recent_.size(); ++i) {
      const std::vector<uint8_t>& t = recent_[i];
      const size_t n = std::min(t.size(), tape_.size());
      size_t p = 0;
      while (p < n && t[p] == tape_[p]) ++p;
      if (p >= best_prefix) best = i, best_prefix = p;
    }
    const std::vector<OpInfo> ops = Ops(tape_);
    size_t op = 0;
    while (op + 1 < ops.size() && ops[op].end <= best_prefix) ++op;
    std::string what = "tag " + std::to_string(ops.empty() ? 0 : ops[op].tag);
    if (!ops.empty() && ops[op].tag == kKernel) {
      const char* name = nullptr;
      if (cudaFuncGetName(&name, ops[op].func) != cudaSuccess || name == nullptr) {
        cudaGetLastError();
        name = "?";
      }
      size_t param = 0;
      while (param < ops[op].params.size() && ops[op].params[param] <= best_prefix) ++param;
      what = std::string("kernel ") + name +
             (best_prefix < (ops[op].params.empty() ? 0 : ops[op].params[0])
                  ? " (launch shape)"
                  : " (parameter " + std::to_string(static_cast<int>(param) - 1) + ")");
    } else if (!ops.empty() && ops[op].tag == kCopy) {
      what = "copy (byte " + std::to_string(best_prefix - ops[op].start) + " of the op)";
    }
    LOG_INFO(
        "graph tape miss: {} ops, {} kernels, {} bytes; closest recent tape ({} bytes) "
        "differs at op {} of {}: {}",
        ops_, kernels_, tape_.size(), recent_[best].size(), op, ops.size(), what);
    ++debug_lines_;
  }
  if (recent_.size() >= 16) recent_.erase(recent_.begin());
  recent_.push_back(tape_);
}

void StreamTape::Reset() {
  tape_.clear();
  calls_.clear();
  ops_ = 0;
  kernels_ = 0;
}

}  // namespace deepinfer::backend::cuda

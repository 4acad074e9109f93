// StreamTape: recording, flushing (graph or op by op) and the graph cache. The byte layout:
// stream_tape_format.h.
#include "backend/cuda/stream_tape.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "backend/cuda/kernel_census.h"
#include "backend/cuda/stream_tape_format.h"
#include "base/check.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {

namespace tape_format {

TapeOp ReadOp(Reader& r) {
  TapeOp op;
  r.Align(8);
  op.start = r.at();
  op.tag = r.Get<uint32_t>();
  if (op.tag == kKernel) {
    op.config.numAttrs = r.Get<uint32_t>();
    CHECK_LE(op.config.numAttrs, kMaxAttrs) << "corrupt stream tape";
    op.func = reinterpret_cast<const void*>(r.Get<uint64_t>());
    uint32_t shape[6];
    std::memcpy(shape, r.Skip(sizeof(shape)), sizeof(shape));
    op.config.gridDim = dim3(shape[0], shape[1], shape[2]);
    op.config.blockDim = dim3(shape[3], shape[4], shape[5]);
    op.config.dynamicSmemBytes = r.Get<uint64_t>();
    for (unsigned i = 0; i < op.config.numAttrs; ++i) {
      uint32_t words[4];
      std::memcpy(words, r.Skip(sizeof(words)), sizeof(words));
      cudaLaunchAttribute& a = op.attrs[i];
      a.id = static_cast<cudaLaunchAttributeID>(words[0]);
      if (a.id == cudaLaunchAttributeClusterDimension) {
        a.val.clusterDim.x = words[1];
        a.val.clusterDim.y = words[2];
        a.val.clusterDim.z = words[3];
      } else {
        a.val.programmaticStreamSerializationAllowed = static_cast<int>(words[1]);
      }
    }
    const uint32_t n_args = r.Get<uint32_t>();
    for (uint32_t i = 0; i < n_args; ++i) {
      const uint32_t size = r.Get<uint32_t>();
      r.Align(16);
      op.param_starts.push_back(r.at());
      op.params.push_back(const_cast<uint8_t*>(r.Skip(size)));
    }
    op.params.push_back(nullptr);
  } else if (op.tag == kCopy) {
    op.kind = static_cast<cudaMemcpyKind>(r.Get<uint32_t>());
    op.dst = reinterpret_cast<void*>(r.Get<uint64_t>());
    op.src = reinterpret_cast<const void*>(r.Get<uint64_t>());
    op.bytes = r.Get<uint64_t>();
  } else if (op.tag == kCall) {
    const uint32_t key_bytes = r.Get<uint32_t>();
    op.call_index = r.Get<uint64_t>();
    r.Skip(key_bytes);
  } else if (op.tag == kFork || op.tag == kToMain || op.tag == kJoin) {
    // tag only
  } else {
    CHECK_EQ(op.tag, uint32_t{kMemset}) << "corrupt stream tape";
    op.value = r.Get<int32_t>();
    op.dst = reinterpret_cast<void*>(r.Get<uint64_t>());
    op.bytes = r.Get<uint64_t>();
  }
  op.end = r.at();
  return op;
}

}  // namespace tape_format

using tape_format::kCall;
using tape_format::kCopy;
using tape_format::kFork;
using tape_format::kJoin;
using tape_format::kKernel;
using tape_format::kMaxAttrs;
using tape_format::kMemset;
using tape_format::kToMain;

StreamTape::~StreamTape() {
  ForgetGraphs();
  if (side_ != nullptr) cudaStreamDestroy(side_);
  if (fork_event_ != nullptr) cudaEventDestroy(fork_event_);
  if (join_event_ != nullptr) cudaEventDestroy(join_event_);
}

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
  // Launchers ignore what their launch returns and read cudaGetLastError, so an unrecordable
  // launch must not be a returned error: it is a broken invariant of this file's layout.
  CHECK_LE(config.numAttrs, kMaxAttrs) << "kernel launch with too many attributes to record";
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const cudaLaunchAttributeID id = config.attrs[i].id;
    CHECK(id == cudaLaunchAttributeProgrammaticStreamSerialization ||
          id == cudaLaunchAttributeClusterDimension)
        << "kernel launch attribute " << static_cast<int>(id) << " cannot be recorded";
  }
  if (KernelSkippedForMeasurement(func)) return cudaSuccess;  // kernel_census.h
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
    // Values are kept at 16-byte offsets whatever their type's alignment (up to 64: TMA maps):
    // the runtime copies a parameter's bytes from the address it is given.
    CHECK_LE(args.aligns[i], 64u) << "kernel parameter aligned to more than 64 bytes";
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

void StreamTape::RecordMarker(uint32_t tag) {
  PadTo(8);
  Put(tag);
  ++ops_;
}

void StreamTape::RecordFork() {
  CHECK(!fork_open_) << "StreamTape: a side lane is already open";
  RecordMarker(kFork);
  ++forks_;
  fork_open_ = true;
  lane_ = 1;
}

void StreamTape::RecordToMain() {
  CHECK(fork_open_ && lane_ == 1) << "StreamTape: no side lane to leave";
  RecordMarker(kToMain);
  lane_ = 0;
}

void StreamTape::RecordJoin() {
  CHECK(fork_open_) << "StreamTape: no side lane to join";
  if (lane_ == 1) RecordToMain();
  RecordMarker(kJoin);
  fork_open_ = false;
}

void StreamTape::RecordCall(const void* key, size_t key_bytes,
                            std::function<cudaError_t(cudaStream_t)> issue) {
  PadTo(8);
  Put(uint32_t{kCall});
  Put(static_cast<uint32_t>(key_bytes));
  Put(static_cast<uint64_t>(calls_.size()));
  Put(key, key_bytes);
  calls_.push_back(std::move(issue));
  ++ops_;
}

bool StreamTape::EnsureSideLane() {
  if (side_ != nullptr) return true;
  if (cudaStreamCreateWithFlags(&side_, cudaStreamNonBlocking) != cudaSuccess ||
      cudaEventCreateWithFlags(&fork_event_, cudaEventDisableTiming) != cudaSuccess ||
      cudaEventCreateWithFlags(&join_event_, cudaEventDisableTiming) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return true;
}

cudaError_t StreamTape::Issue(bool lanes) {
  tape_format::Reader r(tape_);
  cudaStream_t on = stream_;  // the stream of the current lane (always stream_ unless lanes)
  // With lanes, the first kernel after a fork, a return to the main lane or a join depends
  // fully on what precedes it (no programmatic edge across the lanes' event edges).
  bool full_edge = false;
  while (!r.done()) {
    tape_format::TapeOp op = tape_format::ReadOp(r);
    cudaError_t e = cudaSuccess;
    if (op.tag == kKernel) {
      if (full_edge) {
        for (unsigned i = 0; i < op.config.numAttrs; ++i) {
          if (op.attrs[i].id == cudaLaunchAttributeProgrammaticStreamSerialization) {
            op.attrs[i].val.programmaticStreamSerializationAllowed = 0;
          }
        }
        full_edge = false;
      }
      op.config.stream = on;
      op.config.attrs = op.attrs;
      e = cudaLaunchKernelExC(&op.config, op.func, op.params.data());
      if (e != cudaSuccess) LogFailedLaunch(op, e);
    } else if (op.tag == kCopy) {
      e = cudaMemcpyAsync(op.dst, op.src, op.bytes, op.kind, on);
    } else if (op.tag == kCall) {
      CHECK_LT(op.call_index, calls_.size()) << "corrupt stream tape";
      e = calls_[op.call_index](on);
    } else if (op.tag == kMemset) {
      e = cudaMemsetAsync(op.dst, op.value, op.bytes, on);
    } else if (!lanes) {
      // Markers: op by op, every lane runs on stream_ in the recorded order.
    } else if (op.tag == kFork) {
      full_edge = true;
      e = cudaEventRecord(fork_event_, stream_);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(side_, fork_event_, 0);
      on = side_;
    } else if (op.tag == kToMain) {
      full_edge = true;
      on = stream_;
    } else {  // kJoin
      full_edge = true;
      e = cudaEventRecord(join_event_, side_);
      if (e == cudaSuccess) e = cudaStreamWaitEvent(stream_, join_event_, 0);
      on = stream_;
    }
    if (e != cudaSuccess) return e;
  }
  return cudaSuccess;
}

bool StreamTape::Branches(cudaGraph_t graph) {
  size_t n = 0;
  if (cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::vector<cudaGraphNode_t> from(n), to(n);
  std::vector<cudaGraphEdgeData> data(n);
  if (n == 0 || cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &n) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  std::sort(from.begin(), from.end());
  return std::adjacent_find(from.begin(), from.end()) != from.end();
}

cudaGraphExec_t StreamTape::CaptureAs(bool lanes) {
  if (cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
    cudaGetLastError();
    return nullptr;
  }
  const cudaError_t issued = Issue(lanes);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
  cudaGraphExec_t exec = nullptr;
  if (issued == cudaSuccess && ended == cudaSuccess && graph != nullptr &&
      cudaGraphInstantiateWithFlags(&exec, graph, 0) != cudaSuccess) {
    exec = nullptr;
  }
  if (exec != nullptr && lanes && Branches(graph)) ++stats_.forked_graphs;
  if (exec != nullptr && KernelCensusOn()) LogCensus();
  if (graph != nullptr) cudaGraphDestroy(graph);
  if (exec == nullptr) {
    LOG_WARN("CUDA graph capture of {} ops{} failed: issue {}, end capture {}", ops_,
             lanes ? " (side lane on a second stream)" : "", cudaGetErrorString(issued),
             cudaGetErrorString(ended));
    cudaGetLastError();
  }
  return exec;
}

cudaGraphExec_t StreamTape::Capture(uint64_t hash) {
  // With side lanes first; if that capture fails, the same tape in order on one stream.
  const bool lanes = forks_ > 0 && EnsureSideLane();
  cudaGraphExec_t exec = CaptureAs(lanes);
  if (exec == nullptr && lanes) exec = CaptureAs(false);
  if (exec == nullptr) return nullptr;
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
  // A tape that ends inside a side lane (flushed before its join) runs op by op.
  if (graphs_ && kernels_ >= min_graph_kernels_ && !fork_open_) {
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
    e = Issue(/*lanes=*/false);
    ++stats_.eager_flushes;
    stats_.eager_kernels += kernels_;
  }
  Reset();
  return e;
}

void StreamTape::Reset() {
  tape_.clear();
  calls_.clear();
  ops_ = 0;
  kernels_ = 0;
  forks_ = 0;
  fork_open_ = false;
  lane_ = 0;
}

}  // namespace deepinfer::backend::cuda

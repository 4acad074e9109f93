// StreamTape: records the work a backend would enqueue on its stream (kernel launches,
// copies, memsets, opaque calls such as cuBLAS GEMMs) and issues it later, in the same order:
// as one launch of a cached CUDA graph when exactly the same work was recorded before,
// otherwise op by op.
//
// Why: a decode step is ~180-280 small dependent kernels. Issued one by one, the host spends
// ~2-4 us per launch; replayed from instantiated graphs, a step is a few cudaGraphLaunch
// calls (its segments, see CudaBackend::set_graph_segment_kernels) and the device runs each
// back to back (PDL edges included: a launch recorded with
// cudaLaunchAttributeProgrammaticStreamSerialization becomes a programmatic edge).
//
// Contract (what makes a replay correct):
// * Identity: a graph is replayed only for a tape that is byte-for-byte the tape it was
//   captured from: the same kernels, launch shapes, attributes and parameter values
//   (pointers included), the same copies (addresses and sizes) and memsets. Only the bytes
//   that host-to-device copies, or kernels reading the pinned staging (kernels::UploadPinned),
//   read may differ: they are read from pinned host memory when the graph runs, not when it
//   was recorded.
// * Parameter bytes are compared as they are, padding included: a parameter struct built with
//   indeterminate padding may make equal work miss its graph (never replay other work); build
//   such structs value-initialised.
// * Host sources: RecordCopy of cudaMemcpyHostToDevice, and a recorded kernel that reads host
//   memory, require it page-locked and unchanged until the flushed work has run (the backend's
//   pinned staging, reclaimed only after a stream synchronisation).
// * Lifetime: every device address a recorded op uses must stay allocated until Flush has
//   issued it and the stream has run it. The owner flushes before freeing device memory
//   (arena trim, weight eviction) and before any stream work it issues directly
//   (device-to-host copies, pageable uploads, events).
// * Side lane: work recorded between RecordFork and RecordToMain may run concurrently with
//   the work recorded after RecordToMain until RecordJoin, when the tape runs as a graph (the
//   graph gets two branches, joined again). Issued op by op, the tape runs in the recorded
//   order. The recorder guarantees that the two lanes share no data that either writes, and
//   that no device memory is handed from one lane to the other in between (the backend
//   defers releases from the fork to the join).
// * Policy: a tape is captured into a graph the second time it is seen (one-off tapes, e.g.
//   prefill chunks, are issued op by op and never instantiated); at most kMaxGraphs graphs
//   are kept, least recently used evicted (a decode step is ~6-8 segments, times 2 for the
//   compressors' parity: ~12-16 graphs per batch shape in use).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>
#include <unordered_map>
#include <vector>

#include "backend/cuda/launch_sink.h"

namespace deepinfer::backend::cuda {
namespace tape_format {
struct TapeOp;
}  // namespace tape_format

class StreamTape final : public kernels::launch::Sink {
 public:
  struct Stats {
    int64_t graph_launches = 0;  // flushes issued as one launch of a cached graph
    int64_t graph_captures = 0;  // graphs captured and instantiated
    int64_t eager_flushes = 0;   // flushes issued op by op
    int64_t graph_kernels = 0;   // kernels run inside graph launches (captures included)
    int64_t eager_kernels = 0;   // kernels issued one by one by flushes
    int64_t forked_graphs = 0;   // captured graphs in which some op has two or more successors
  };
  static constexpr int kMaxGraphs = 512;

  explicit StreamTape(cudaStream_t stream) : stream_(stream) {}
  ~StreamTape() override;  // destroys the cached graphs (never flushes)
  StreamTape(const StreamTape&) = delete;
  StreamTape& operator=(const StreamTape&) = delete;

  cudaStream_t recorded_stream() const override { return stream_; }
  // Appends a launch (always cudaSuccess). CHECK-fails for a launch attribute other than PDL
  // and the cluster dimension, or more than 4 attributes.
  cudaError_t RecordKernel(const cudaLaunchConfig_t& config, const void* func,
                           const kernels::launch::KernelArgs& args) override;
  // Appends cudaMemcpyAsync(dst, src, bytes, kind) (kind: host-to-device from pinned memory,
  // see the contract, or device-to-device).
  void RecordCopy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
  // Appends cudaMemsetAsync(dst, value, bytes).
  void RecordMemset(void* dst, int value, size_t bytes);
  // Appends a call that enqueues work on a stream by other means (a cuBLAS GEMM). `key`
  // (key_bytes) must hold every value the call's work depends on: equal keys must mean equal
  // work, as for a kernel's parameters. `issue(stream)` runs at the flush (eagerly, or under
  // stream capture the first time the tape becomes a graph), enqueues on `stream` (the
  // stream of the op's lane), and owns copies of what it needs.
  void RecordCall(const void* key, size_t key_bytes,
                  std::function<cudaError_t(cudaStream_t)> issue);
  // The side lane (see the contract): RecordFork starts it (the ops after it depend on all
  // before it), RecordToMain returns to the main lane, RecordJoin makes the ops after it
  // depend on both lanes (and returns to the main lane). CHECK-fails out of this order.
  void RecordFork();
  void RecordToMain();
  void RecordJoin();
  // The lane new ops are recorded in (0 main, 1 side), and whether a fork awaits its join.
  int lane() const { return lane_; }
  bool fork_open() const { return fork_open_; }

  bool empty() const { return ops_ == 0; }
  int64_t recorded_kernels() const { return kernels_; }
  // Issues everything recorded, in order, on the stream (as a graph or op by op, see the
  // policy) and empties the tape. Returns the first error; after an error the tape is empty
  // and whatever was not issued is dropped (the owner's status is failed by then).
  cudaError_t Flush();
  // Graph use (on by default): off issues every flush op by op.
  void set_graphs(bool on) { graphs_ = on; }
  bool graphs() const { return graphs_; }
  // Tapes with fewer kernels than this are issued op by op (default 1: a repeated tail of a
  // few kernels, e.g. a decode step's head and argmax, is a graph too).
  void set_min_graph_kernels(int64_t n) { min_graph_kernels_ = n; }
  const Stats& stats() const { return stats_; }
  // Diagnostics: when on, each tape that is not replayed is compared with the recent tapes
  // and the first op where it differs from the closest one is logged (at most 64 lines).
  void set_debug(bool on) { debug_ = on; }
  // Destroys every cached graph (their recorded addresses may be stale).
  void ForgetGraphs();

 private:
  struct Cached {
    std::vector<uint8_t> tape;
    cudaGraphExec_t exec = nullptr;
    uint64_t last_use = 0;
  };

  void Put(const void* p, size_t n);
  template <typename T>
  void Put(const T& v) {
    Put(&v, sizeof(T));
  }
  void PadTo(size_t alignment);
  // Issues the tape op by op: with `lanes`, the side lane's ops on side_ between event
  // record / wait pairs (what a capture records); without, every op on stream_ in order.
  cudaError_t Issue(bool lanes);
  // Whether some node of `graph` has two or more dependent nodes (the side lane branched off).
  static bool Branches(cudaGraph_t graph);
  // Creates side_ and the fork / join events on first use (false on failure).
  bool EnsureSideLane();
  void RecordMarker(uint32_t tag);
  // Captures the tape into a new cached graph (null on failure) and returns it: with its
  // side lanes on a second stream, or, if that fails, in order on stream_.
  cudaGraphExec_t Capture(uint64_t hash);
  // One capture attempt (Issue(lanes) under stream capture); the instantiated graph or null.
  cudaGraphExec_t CaptureAs(bool lanes);
  // Logs the tape's kernels by name and count (DEEPINFER_CUDA_KERNEL_CENSUS, kernel_census.h).
  void LogCensus() const;
  void Reset();
  // The debug log line of a tape that is not replayed (see set_debug; stream_tape_debug.cc).
  void ExplainMiss();
  // Logs a recorded launch that failed when issued: its kernel's name and launch shape.
  void LogFailedLaunch(const tape_format::TapeOp& op, cudaError_t e) const;

  cudaStream_t stream_;
  std::vector<uint8_t> tape_;  // the serialised ops (layout: stream_tape.cc)
  std::vector<std::function<cudaError_t(cudaStream_t)>> calls_;  // RecordCall's, in order
  int64_t ops_ = 0;
  int64_t kernels_ = 0;
  int64_t forks_ = 0;            // forks recorded in the tape
  bool fork_open_ = false;       // a fork awaits its join
  int lane_ = 0;                 // lane of the next op
  cudaStream_t side_ = nullptr;  // the side lane's stream under capture (EnsureSideLane)
  cudaEvent_t fork_event_ = nullptr, join_event_ = nullptr;
  bool graphs_ = true;
  int64_t min_graph_kernels_ = 1;
  uint64_t clock_ = 0;
  std::unordered_map<uint64_t, Cached> cache_;   // tape hash -> graph
  std::unordered_map<uint64_t, int> sightings_;  // tape hash -> times seen (bounded)
  Stats stats_;
  bool debug_ = false;
  int debug_lines_ = 0;
  std::vector<std::vector<uint8_t>> recent_;  // debug: the last tapes flushed
};

}  // namespace deepinfer::backend::cuda

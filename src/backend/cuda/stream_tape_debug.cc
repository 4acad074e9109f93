// StreamTape diagnostics: why a tape is not replayed (DEEPINFER_CUDA_GRAPH_DEBUG=1) and which
// recorded launch failed.
#include <algorithm>
#include <string>

#include "backend/cuda/kernel_census.h"
#include "backend/cuda/stream_tape.h"
#include "backend/cuda/stream_tape_format.h"
#include "base/logging.h"

namespace deepinfer::backend::cuda {
namespace {

using tape_format::TapeOp;

// What differs at byte `at` of op `op`: the launch shape or which parameter of a kernel, the
// byte of a copy, else the op's tag.
std::string Difference(const TapeOp& op, size_t at) {
  if (op.tag == tape_format::kKernel) {
    if (op.param_starts.empty() || at < op.param_starts[0]) {
      return std::string("kernel ") + KernelSymbol(op.func) + " (launch shape)";
    }
    size_t param = 0;
    while (param + 1 < op.param_starts.size() && op.param_starts[param + 1] <= at) ++param;
    return std::string("kernel ") + KernelSymbol(op.func) + " (parameter " + std::to_string(param) +
           ")";
  }
  if (op.tag == tape_format::kCopy) {
    return "copy (byte " + std::to_string(at - op.start) + " of the op)";
  }
  return "tag " + std::to_string(op.tag);
}

}  // namespace

void StreamTape::LogFailedLaunch(const tape_format::TapeOp& op, cudaError_t e) const {
  const dim3& g = op.config.gridDim;
  LOG_ERROR("recorded launch of {} (grid {}x{}x{}, block {}, smem {}, {} attributes) failed: {}",
            KernelSymbol(op.func), g.x, g.y, g.z, op.config.blockDim.x, op.config.dynamicSmemBytes,
            op.config.numAttrs, cudaGetErrorString(e));
}

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
    tape_format::Reader r(tape_);
    TapeOp op;
    int64_t index = -1;
    while (!r.done()) {
      op = tape_format::ReadOp(r);
      ++index;
      if (op.end > best_prefix) break;
    }
    LOG_INFO(
        "graph tape miss: {} ops, {} kernels, {} bytes; closest recent tape ({} bytes) "
        "differs at op {}: {}",
        ops_, kernels_, tape_.size(), recent_[best].size(), index, Difference(op, best_prefix));
    ++debug_lines_;
  }
  if (recent_.size() >= 16) recent_.erase(recent_.begin());
  recent_.push_back(tape_);
}

void StreamTape::LogCensus() const {
  KernelCensus census;
  tape_format::Reader r(tape_);
  while (!r.done()) {
    const tape_format::TapeOp op = tape_format::ReadOp(r);
    if (op.tag == tape_format::kKernel) census.Add(op.func);
  }
  LOG_INFO("graph of {} ops: {}", ops_, census.Summary());
}

}  // namespace deepinfer::backend::cuda

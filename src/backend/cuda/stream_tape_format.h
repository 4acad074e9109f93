// StreamTape's byte layout, read back (internal to stream_tape*.cc).
//
// A tape is a sequence of ops, each starting at an 8-byte boundary with a uint32 tag:
//   kernel: tag, n_attrs, func (u64), grid xyz, block xyz (u32), smem (u64),
//           n_attrs x {id, three u32 payload words}, n_args (u32),
//           n_args x {size (u32), [16-aligned] value bytes}
//   copy:   tag, kind (u32), dst, src, bytes (u64)
//   memset: tag, value (i32), dst, bytes (u64)
//   call:   tag, key bytes (u32), index into the tape's calls (u64), key bytes
//   fork / to-main / join: tag only (the side lane's markers, see StreamTape::RecordFork)
// Every field is written explicitly (no padding of the tape's own), so equal work gives equal
// bytes. Parameter values start at 16-byte offsets of the tape's storage; pointers into it are
// passed to cudaLaunchKernelExC, which copies the bytes (a type aligned to more, up to 64 as the
// TMA maps of the TMA-fed Linear removed in session 24, needed no more from the host copy: runs
// 125-127).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <vector>

namespace deepinfer::backend::cuda::tape_format {

enum Tag : uint32_t {
  kKernel = 1,
  kCopy = 2,
  kMemset = 3,
  kCall = 4,
  kFork = 5,    // the ops after it run in the side lane, after everything before it
  kToMain = 6,  // the ops after it run in the main lane again (concurrently with the side)
  kJoin = 7,    // the ops after it run after both lanes' ops before it
};
constexpr unsigned kMaxAttrs = 4;  // launch attributes a recorded kernel may carry

// Reads a tape back in the order it was written.
class Reader {
 public:
  explicit Reader(const std::vector<uint8_t>& tape) : base_(tape.data()), end_(tape.size()) {}
  bool done() const { return at_ >= end_; }
  size_t at() const { return at_; }
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

// One op of a tape. Kernels: config without stream and attrs pointer (set them before a
// launch), params point into the tape. [start, end) is the op's byte range.
struct TapeOp {
  uint32_t tag = 0;
  size_t start = 0, end = 0;
  const void* func = nullptr;
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[kMaxAttrs] = {};
  std::vector<void*> params;         // n_args + 1 (a trailing null)
  std::vector<size_t> param_starts;  // byte offset of each parameter's value
  cudaMemcpyKind kind = cudaMemcpyDefault;
  void* dst = nullptr;
  const void* src = nullptr;
  uint64_t bytes = 0;
  int value = 0;
  uint64_t call_index = 0;
};

// The op at the reader's position (which then moves past it). CHECK-fails on a corrupt tape.
TapeOp ReadOp(Reader& r);

}  // namespace deepinfer::backend::cuda::tape_format

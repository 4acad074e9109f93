// Measurement switches over the kernels a StreamTape records (for the decode-step studies of
// bench/gpu; not for serving). Both are read from the environment once per process:
//
//   DEEPINFER_CUDA_SKIP_KERNELS=a,b,...  recorded launches (CUDA graphs / the tape; launches
//       issued directly are not affected) whose kernel symbol (mangled) contains any of the
//       comma-separated substrings are dropped: the work then computes wrong values, and
//       stale indices may stop it (a selection or expert id out of range). What a step loses
//       without a kernel bounds what fusing or speeding up that kernel can gain in the step
//       (PDL overlap included), which per-kernel times cannot.
//   DEEPINFER_CUDA_KERNEL_CENSUS=1  every captured graph logs its kernels: count per kernel
//       name, in order of first launch.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer::backend::cuda {

// The kernel's symbol (mangled; "?" if the runtime does not know it).
std::string KernelSymbol(const void* func);
// A short readable name: the demangled symbol without namespaces and parameter lists.
std::string KernelShortName(const void* func);

// Whether the skip patterns (DEEPINFER_CUDA_SKIP_KERNELS, or SetKernelSkipPatterns) drop
// launches of `func` (false when there are none).
bool KernelSkippedForMeasurement(const void* func);
// Replaces the skip patterns for the rest of the process (tests; empty: none).
void SetKernelSkipPatterns(std::vector<std::string> patterns);

// Sets the skip patterns for a scope and clears them when it ends (tests: the patterns are
// process-wide).
class ScopedKernelSkipPatterns {
 public:
  explicit ScopedKernelSkipPatterns(std::vector<std::string> patterns) {
    SetKernelSkipPatterns(std::move(patterns));
  }
  ~ScopedKernelSkipPatterns() { SetKernelSkipPatterns({}); }
  ScopedKernelSkipPatterns(const ScopedKernelSkipPatterns&) = delete;
  ScopedKernelSkipPatterns& operator=(const ScopedKernelSkipPatterns&) = delete;
};

// "a,, b" -> {"a", "b"} (spaces dropped).
std::vector<std::string> SplitKernelPatterns(const char* text);
// "void ns::(anonymous namespace)::Name<args>(params)" -> "Name<args>".
std::string ShortenDemangled(std::string name);
// Whether DEEPINFER_CUDA_KERNEL_CENSUS is on.
bool KernelCensusOn();

// Counts launches per kernel, in order of first launch.
class KernelCensus {
 public:
  void Add(const void* func);
  // "<total> kernels: <count>x <name>, ..." with names by KernelShortName.
  std::string Summary() const;

 private:
  std::vector<const void*> order_;
  std::map<const void*, int> counts_;
  int total_ = 0;
};

}  // namespace deepinfer::backend::cuda

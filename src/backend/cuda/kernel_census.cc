// Measurement switches over recorded kernels (kernel_census.h).
#include "backend/cuda/kernel_census.h"

#include <cuda_runtime_api.h>
#include <cxxabi.h>

#include <atomic>
#include <cstdlib>
#include <mutex>
#include <utility>

namespace deepinfer::backend::cuda {

std::vector<std::string> SplitKernelPatterns(const char* s) {
  std::vector<std::string> parts;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) parts.push_back(cur);
      cur.clear();
      if (*p == '\0') break;
    } else if (*p != ' ') {  // "a, b" means "a,b" (kernel symbols have no spaces)
      cur += *p;
    }
  }
  return parts;
}

namespace {

// The skip patterns and the verdict per kernel, under one mutex (launches come from any thread).
struct SkipState {
  std::atomic<bool> any{false};  // patterns non-empty (the lock-free common case)
  std::mutex mu;
  std::vector<std::string> patterns;
  std::map<const void*, bool> known;
};
SkipState& Skips() {
  static SkipState* state = [] {
    auto* s = new SkipState;
    const char* env = std::getenv("DEEPINFER_CUDA_SKIP_KERNELS");
    if (env != nullptr) s->patterns = SplitKernelPatterns(env);
    s->any = !s->patterns.empty();
    return s;
  }();
  return *state;
}

}  // namespace

std::string ShortenDemangled(std::string name) {
  const std::string anon = "(anonymous namespace)::";
  for (size_t at; (at = name.find(anon)) != std::string::npos;) name.erase(at, anon.size());
  if (name.rfind("void ", 0) == 0) name.erase(0, 5);
  int angle = 0;
  size_t last_qualifier = 0;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') ++angle;
    if (c == '>') --angle;
    if (angle != 0) continue;
    if (c == '(') {
      name.resize(i);
      break;
    }
    if (c == ':' && i + 1 < name.size() && name[i + 1] == ':') last_qualifier = i + 2;
  }
  return name.substr(last_qualifier);
}

std::string KernelSymbol(const void* func) {
  const char* name = nullptr;
  if (cudaFuncGetName(&name, func) != cudaSuccess || name == nullptr) {
    cudaGetLastError();
    return "?";
  }
  return name;
}

std::string KernelShortName(const void* func) {
  const std::string symbol = KernelSymbol(func);
  int status = 0;
  char* demangled = abi::__cxa_demangle(symbol.c_str(), nullptr, nullptr, &status);
  if (status != 0 || demangled == nullptr) return symbol;
  std::string out = ShortenDemangled(demangled);
  std::free(demangled);
  return out;
}

bool KernelSkippedForMeasurement(const void* func) {
  SkipState& state = Skips();
  if (!state.any.load(std::memory_order_acquire)) return false;
  std::lock_guard<std::mutex> lock(state.mu);
  if (auto it = state.known.find(func); it != state.known.end()) return it->second;
  const std::string symbol = KernelSymbol(func);
  bool skip = false;
  for (const auto& p : state.patterns) skip = skip || symbol.find(p) != std::string::npos;
  return state.known[func] = skip;
}

void SetKernelSkipPatterns(std::vector<std::string> patterns) {
  SkipState& state = Skips();
  std::lock_guard<std::mutex> lock(state.mu);
  state.patterns = std::move(patterns);
  state.known.clear();
  state.any.store(!state.patterns.empty(), std::memory_order_release);
}

bool KernelCensusOn() {
  static const bool on = [] {
    const char* env = std::getenv("DEEPINFER_CUDA_KERNEL_CENSUS");
    return env != nullptr && env[0] != '\0' && env[0] != '0';
  }();
  return on;
}

void KernelCensus::Add(const void* func) {
  if (counts_[func]++ == 0) order_.push_back(func);
  ++total_;
}

std::string KernelCensus::Summary() const {
  std::string out = std::to_string(total_) + " kernels:";
  for (const void* f : order_) {
    out += ' ';
    out += std::to_string(counts_.at(f));
    out += "x ";
    out += KernelShortName(f);
    out += ',';
  }
  if (!order_.empty()) out.pop_back();
  return out;
}

}  // namespace deepinfer::backend::cuda

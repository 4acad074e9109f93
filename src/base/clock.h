// Monotonic time helpers. All durations are in nanoseconds unless the name says otherwise.
#pragma once

#include <chrono>
#include <cstdint>

namespace deepinfer::base {

// Nanoseconds on the steady (monotonic) clock; only differences are meaningful.
inline int64_t MonotonicNanos() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Seconds since the Unix epoch (wall clock), e.g. for API "created" fields.
inline int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// Measures elapsed monotonic time since construction or the last Reset().
class Stopwatch {
 public:
  Stopwatch() : start_(MonotonicNanos()) {}
  void Reset() { start_ = MonotonicNanos(); }
  int64_t ElapsedNanos() const { return MonotonicNanos() - start_; }
  double ElapsedSeconds() const { return static_cast<double>(ElapsedNanos()) * 1e-9; }
  double ElapsedMillis() const { return static_cast<double>(ElapsedNanos()) * 1e-6; }

 private:
  int64_t start_;
};

}  // namespace deepinfer::base

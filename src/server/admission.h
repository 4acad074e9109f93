// Admission control for generation requests: at most `max_running` run at once, at most
// `max_queued` wait for a slot (FIFO); beyond that a request is rejected (HTTP 429). Bounds
// the memory held by waiting requests. Thread-safe.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>

namespace deepinfer::server {

class Admission {
 public:
  Admission(int max_running, int max_queued) : max_running_(max_running), max_queued_(max_queued) {}

  enum class Result { kStarted, kQueued, kRejected };

  // kStarted: `start` ran on this thread. kQueued: it runs later, from inside some Leave()
  // call, once a slot frees. kRejected: it never runs.
  Result Enter(std::function<void()> start);
  // Frees the slot of a started request; runs the next queued start (on this thread).
  void Leave();

  int64_t running() const;
  int64_t queued() const;

 private:
  const int max_running_;
  const int max_queued_;
  mutable std::mutex mutex_;
  int64_t running_ = 0;
  std::deque<std::function<void()>> queue_;
};

}  // namespace deepinfer::server

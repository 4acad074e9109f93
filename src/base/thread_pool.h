// A fixed-size thread pool with a FIFO task queue and a blocking ParallelFor.
//
// Thread-safety: Submit and ParallelFor may be called from any thread, including from
// inside a task (ParallelFor then runs the work inline on the caller to avoid deadlock).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace deepinfer::base {

class ThreadPool {
 public:
  // num_threads <= 0 means std::thread::hardware_concurrency().
  explicit ThreadPool(int num_threads);
  ~ThreadPool();  // finishes queued tasks, then joins
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()); }

  // Runs `task` on some worker, eventually.
  void Submit(std::function<void()> task);

  // Splits [0, n) into contiguous ranges of at least `min_chunk` items and calls
  // fn(begin, end) for each, in parallel (the caller participates); returns when all are
  // done. Ranges are deterministic for a given (n, num_threads, min_chunk).
  void ParallelFor(int64_t n, int64_t min_chunk,
                   const std::function<void(int64_t begin, int64_t end)>& fn);

  // A process-wide pool sized to the machine, created on first use.
  static ThreadPool& Default();

 private:
  void WorkerLoop();
  static bool& InWorker();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace deepinfer::base

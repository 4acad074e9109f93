#include "base/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <latch>

#include "base/check.h"

namespace deepinfer::base {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::thread::hardware_concurrency());
  num_threads = std::max(num_threads, 1);
  workers_.reserve(num_threads);
  for (int i = 0; i < num_threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) worker.join();
}

bool& ThreadPool::InWorker() {
  thread_local bool in_worker = false;
  return in_worker;
}

void ThreadPool::Submit(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    CHECK(!stopping_) << "Submit on a stopping ThreadPool";
    queue_.push_back(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::WorkerLoop() {
  InWorker() = true;
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping and drained
      task = std::move(queue_.front());
      queue_.pop_front();
    }
    task();
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_chunk,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  min_chunk = std::max<int64_t>(min_chunk, 1);
  const int64_t max_parts = static_cast<int64_t>(workers_.size()) + 1;
  const int64_t parts = std::clamp<int64_t>(n / min_chunk, 1, max_parts);
  if (parts == 1 || InWorker()) {
    fn(0, n);
    return;
  }
  const int64_t chunk = (n + parts - 1) / parts;
  std::latch done(parts - 1);
  for (int64_t p = 1; p < parts; ++p) {
    const int64_t begin = std::min(n, p * chunk);
    const int64_t end = std::min(n, begin + chunk);
    Submit([&fn, &done, begin, end] {
      if (begin < end) fn(begin, end);
      done.count_down();
    });
  }
  fn(0, std::min(n, chunk));
  done.wait();
}

ThreadPool& ThreadPool::Default() {
  static ThreadPool pool(0);
  return pool;
}

}  // namespace deepinfer::base

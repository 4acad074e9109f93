#include "server/admission.h"

#include <utility>

namespace deepinfer::server {

Admission::Result Admission::Enter(std::function<void()> start) {
  {
    std::lock_guard lock(mutex_);
    if (running_ >= max_running_) {
      if (static_cast<int64_t>(queue_.size()) >= max_queued_) return Result::kRejected;
      queue_.push_back(std::move(start));
      return Result::kQueued;
    }
    ++running_;
  }
  start();
  return Result::kStarted;
}

void Admission::Leave() {
  std::function<void()> next;
  {
    std::lock_guard lock(mutex_);
    if (queue_.empty()) {
      --running_;
      return;
    }
    next = std::move(queue_.front());  // the slot passes to it
    queue_.pop_front();
  }
  next();
}

int64_t Admission::running() const {
  std::lock_guard lock(mutex_);
  return running_;
}

int64_t Admission::queued() const {
  std::lock_guard lock(mutex_);
  return static_cast<int64_t>(queue_.size());
}

}  // namespace deepinfer::server

// An in-process GenerationService that "generates" a scripted token sequence, one token per
// request per step, on one worker thread (like a batching engine). For tests and for
// measuring the HTTP layer's own overhead.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <thread>

#include "server/generation_service.h"

namespace deepinfer::server {

struct FakeGenerationOptions {
  // Output for a prompt. The request finishes with kStop after the script (or at the first
  // stop token), with kLength at max_tokens.
  std::function<std::vector<TokenId>(std::span<const TokenId> prompt)> script;
  std::chrono::microseconds step_interval{0};  // sleep between steps
  int64_t context_length = 4096;               // Submit fails past this
};

class FakeGenerationService final : public GenerationService {
 public:
  explicit FakeGenerationService(FakeGenerationOptions options);
  ~FakeGenerationService() override;

  base::StatusOr<int64_t> Submit(GenerationRequest request,
                                 std::shared_ptr<GenerationSink> sink) override;
  void Cancel(int64_t id) override;
  GenerationStats Stats() const override;
  int64_t context_length() const override { return options_.context_length; }

  int64_t cancelled_count() const { return cancelled_count_.load(); }
  int64_t submitted_count() const { return submitted_count_.load(); }

 private:
  struct Active {
    GenerationRequest request;
    std::vector<TokenId> script;
    size_t emitted = 0;
    bool cancel = false;
    std::shared_ptr<GenerationSink> sink;
  };
  void Loop();

  FakeGenerationOptions options_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<int64_t, Active> active_;
  int64_t next_id_ = 1;
  bool stop_ = false;
  std::atomic<int64_t> cancelled_count_{0};
  std::atomic<int64_t> submitted_count_{0};
  std::thread worker_;
};

}  // namespace deepinfer::server

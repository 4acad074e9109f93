// GenerationService over the continuous-batching engine::Engine.
//
// Token events come from the engine thread and go straight to the sink; a token that ends its
// sample (stop / length) also delivers OnFinish. Requests that end without such a token
// (cancelled, rejected, aborted) are noticed by a small reaper thread polling the engine's
// futures (every `poll_interval`), which delivers their OnFinish. Cancel() therefore never
// calls the sink itself (so a sink may call Cancel while holding its own lock).
#pragma once

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine.h"
#include "server/generation_service.h"

namespace deepinfer::server {

struct EngineServiceOptions {
  int64_t max_model_len = 4096;  // as configured in the engine's scheduler
  int64_t block_bytes = 0;       // kv::StateLayout::BlockBytes(), for the memory gauges
  std::chrono::microseconds poll_interval{2000};
};

class EngineGenerationService final : public GenerationService {
 public:
  // `engine` must outlive the service.
  EngineGenerationService(engine::Engine* engine, EngineServiceOptions options);
  ~EngineGenerationService() override;

  base::StatusOr<int64_t> Submit(GenerationRequest request,
                                 std::shared_ptr<GenerationSink> sink) override;
  void Cancel(int64_t id) override;
  GenerationStats Stats() const override;
  int64_t context_length() const override { return options_.max_model_len; }

 private:
  struct Entry {
    std::mutex mutex;
    bool finished = false;
    std::shared_ptr<GenerationSink> sink;
    void OnToken(const engine::TokenEvent& event);
    void FinishOnce(GenerationFinish finish, const base::Status& status);
  };
  struct Tracked {
    std::shared_ptr<Entry> entry;
    std::future<engine::EngineResult> result;
  };
  void Reap();

  engine::Engine* engine_;
  EngineServiceOptions options_;
  std::mutex mutex_;
  std::map<int64_t, Tracked> tracked_;
  std::atomic<bool> stop_{false};
  std::thread reaper_;
};

}  // namespace deepinfer::server

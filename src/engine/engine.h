// Engine: the offline inference API. Owns a Scheduler, its StateManager and a ModelRunner,
// and runs the step loop on its own thread.
//
//   auto engine = Engine::Create(config, std::make_unique<MyRunner>(...));
//   auto sub = (*engine)->Submit(request, [](const TokenEvent& e) { ... });  // any thread
//   EngineResult r = sub.result.get();
//
// Thread-safety: Submit, Cancel, Counters and Generate may be called from any thread.
// Token and done callbacks run on the engine thread, in generation order per request; they
// must not block for long and must not call Generate (Submit/Cancel are fine).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/statusor.h"
#include "engine/model_runner.h"
#include "engine/scheduler.h"
#include "kv/state_layout.h"
#include "kv/state_manager.h"

namespace deepinfer::engine {

struct EngineConfig {
  kv::StateLayout layout;
  int32_t num_blocks = 1024;
  int32_t num_slots = 64;     // max concurrently running sequences
  SchedulerConfig scheduler;  // vocab_size is taken from the runner
};

// Monotonic nanoseconds (base::MonotonicNanos) and derived latencies of one request.
struct RequestTimings {
  int64_t arrival_ns = 0;
  int64_t first_scheduled_ns = 0;  // 0 if never scheduled
  int64_t first_token_ns = 0;      // 0 if no token
  int64_t finished_ns = 0;
  std::vector<int64_t> token_step_ns;  // end of each step that produced tokens for it

  double QueueSeconds() const;  // arrival -> first scheduled
  double TtftSeconds() const;   // arrival -> first token
  std::vector<double> InterTokenSeconds() const;
};

struct EngineResult {
  RequestResult result;
  RequestTimings timings;
};

using TokenCallback = std::function<void(const TokenEvent&)>;
// Called once when a request ends for any reason (finished, cancelled, aborted, rejected),
// on the engine thread, just before its future becomes ready.
using DoneCallback = std::function<void(const EngineResult&)>;

struct Submission {
  RequestId id = 0;
  std::future<EngineResult> result;
};

// Totals since start (monotonic counters) and current gauges, for /metrics.
struct EngineCounters {
  int64_t requests_submitted = 0;
  int64_t requests_finished = 0;  // any reason, rejected included
  int64_t requests_cancelled = 0;
  int64_t requests_aborted = 0;
  int64_t requests_rejected = 0;  // failed validation
  int64_t prompt_tokens = 0;      // of accepted requests
  int64_t generated_tokens = 0;
  int64_t steps = 0;
  int64_t preemptions = 0;
  double busy_seconds = 0.0;  // time spent in Schedule + Execute + Update
  // gauges
  int64_t running_sequences = 0;
  int64_t waiting_sequences = 0;
  int32_t free_blocks = 0;
  int32_t total_blocks = 0;
};

class Engine {
 public:
  // InvalidArgument if the layout or scheduler config is inconsistent.
  static base::StatusOr<std::unique_ptr<Engine>> Create(EngineConfig config,
                                                        std::unique_ptr<ModelRunner> runner);
  // Cancels unfinished requests (their futures complete with kCancelled), then joins.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; `request.id` is ignored and a fresh id assigned. Invalid requests
  // complete with a non-OK result.status and no samples.
  Submission Submit(Request request, TokenCallback on_token = {}, DoneCallback on_done = {});
  // Cancels a request (no-op if finished): its state is freed before the next step.
  void Cancel(RequestId id);
  // Submits all, waits for all; results in input order.
  std::vector<EngineResult> Generate(std::vector<Request> requests);

  EngineCounters Counters() const;

 private:
  struct Pending {
    std::promise<EngineResult> promise;
    TokenCallback on_token;
    DoneCallback on_done;
    RequestTimings timings;
    int64_t last_token_step = -1;
  };
  Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner);
  void Loop();
  void DrainInbox();
  bool RunStep();  // false if the plan was empty
  void Complete(RequestResult result);
  void RefreshCountersLocked();  // engine thread, mutex_ held

  EngineConfig config_;
  std::unique_ptr<ModelRunner> runner_;
  kv::StateManager kv_;
  Scheduler scheduler_;  // engine thread only

  mutable std::mutex mutex_;  // guards the fields below
  std::condition_variable cv_;
  std::deque<std::pair<Request, std::unique_ptr<Pending>>> inbox_;
  std::vector<RequestId> cancels_;
  bool stopping_ = false;
  RequestId next_id_ = 1;
  EngineCounters counters_;

  std::unordered_map<RequestId, std::unique_ptr<Pending>> pending_;  // engine thread only
  std::thread thread_;
};

}  // namespace deepinfer::engine

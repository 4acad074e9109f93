#include "engine/engine.h"

#include <utility>

#include "base/clock.h"
#include "base/logging.h"

namespace deepinfer::engine {

double RequestTimings::QueueSeconds() const {
  return first_scheduled_ns ? static_cast<double>(first_scheduled_ns - arrival_ns) * 1e-9 : 0.0;
}

double RequestTimings::TtftSeconds() const {
  return first_token_ns ? static_cast<double>(first_token_ns - arrival_ns) * 1e-9 : 0.0;
}

std::vector<double> RequestTimings::InterTokenSeconds() const {
  std::vector<double> out;
  for (size_t i = 1; i < token_step_ns.size(); ++i) {
    out.push_back(static_cast<double>(token_step_ns[i] - token_step_ns[i - 1]) * 1e-9);
  }
  return out;
}

base::StatusOr<std::unique_ptr<Engine>> Engine::Create(EngineConfig config,
                                                       std::unique_ptr<ModelRunner> runner) {
  if (runner == nullptr) return base::InvalidArgumentError("Engine: no model runner");
  DI_RETURN_IF_ERROR(config.layout.Validate());
  if (config.num_blocks < 1 || config.num_slots < 1) {
    return base::InvalidArgumentError("Engine: num_blocks and num_slots must be >= 1");
  }
  config.scheduler.vocab_size = runner->vocab_size();
  DI_RETURN_IF_ERROR(config.scheduler.Validate(config.num_slots));
  return std::unique_ptr<Engine>(new Engine(std::move(config), std::move(runner)));
}

Engine::Engine(EngineConfig config, std::unique_ptr<ModelRunner> runner)
    : config_(std::move(config)),
      runner_(std::move(runner)),
      kv_(config_.layout, config_.num_blocks, config_.num_slots),
      scheduler_(config_.scheduler, &kv_) {
  thread_ = std::thread([this] { Loop(); });
}

Engine::~Engine() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Submission Engine::Submit(Request request, TokenCallback on_token, DoneCallback on_done) {
  auto pending = std::make_unique<Pending>();
  pending->on_token = std::move(on_token);
  pending->on_done = std::move(on_done);
  pending->timings.arrival_ns = base::MonotonicNanos();
  Submission sub;
  sub.result = pending->promise.get_future();
  bool stopping = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    request.id = next_id_++;
    sub.id = request.id;
    ++counters_.requests_submitted;
    stopping = stopping_;
    if (!stopping) inbox_.emplace_back(std::move(request), std::move(pending));
  }
  if (stopping) {  // Submit racing with the destructor (e.g. from a callback)
    EngineResult r;
    r.result.id = sub.id;
    r.result.status = base::CancelledError("engine is shutting down");
    if (pending->on_done) pending->on_done(r);
    pending->promise.set_value(std::move(r));
    return sub;
  }
  cv_.notify_all();
  return sub;
}

void Engine::Cancel(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
  }
  cv_.notify_all();
}

std::vector<EngineResult> Engine::Generate(std::vector<Request> requests) {
  std::vector<std::future<EngineResult>> futures;
  futures.reserve(requests.size());
  for (Request& r : requests) futures.push_back(Submit(std::move(r)).result);
  std::vector<EngineResult> out;
  out.reserve(futures.size());
  for (auto& f : futures) out.push_back(f.get());
  return out;
}

EngineCounters Engine::Counters() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counters_;
}

void Engine::Complete(RequestResult result) {
  auto it = pending_.find(result.id);
  if (it == pending_.end()) return;
  std::unique_ptr<Pending> p = std::move(it->second);
  pending_.erase(it);
  p->timings.finished_ns = base::MonotonicNanos();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    ++counters_.requests_finished;
    for (const SampleResult& s : result.samples) {
      if (s.finish_reason == FinishReason::kCancelled) {
        ++counters_.requests_cancelled;
        break;
      }
      if (s.finish_reason == FinishReason::kAborted) {
        ++counters_.requests_aborted;
        break;
      }
    }
    RefreshCountersLocked();  // the future's reader sees the freed state
  }
  EngineResult done{std::move(result), std::move(p->timings)};
  if (p->on_done) p->on_done(done);
  p->promise.set_value(std::move(done));
}

void Engine::DrainInbox() {
  std::deque<std::pair<Request, std::unique_ptr<Pending>>> inbox;
  std::vector<RequestId> cancels;
  std::vector<std::pair<std::unique_ptr<Pending>, EngineResult>> pending_rejected;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (auto& [request, pending] : inbox) {
    const RequestId id = request.id;
    const int64_t prompt_tokens = static_cast<int64_t>(request.prompt.size());
    base::Status status = scheduler_.AddRequest(std::move(request));
    std::lock_guard<std::mutex> lock(mutex_);
    if (!status.ok()) {
      ++counters_.requests_rejected;
      ++counters_.requests_finished;
      EngineResult r;
      r.result.id = id;
      r.result.status = status;
      r.timings = pending->timings;
      pending_rejected.push_back({std::move(pending), std::move(r)});
      continue;
    }
    counters_.prompt_tokens += prompt_tokens;
    pending_[id] = std::move(pending);
  }
  for (auto& [pending, result] : pending_rejected) {  // outside the lock: runs callbacks
    if (pending->on_done) pending->on_done(result);
    pending->promise.set_value(std::move(result));
  }
  for (RequestId id : cancels) {
    if (auto r = scheduler_.Cancel(id)) Complete(std::move(*r));
  }
}

bool Engine::RunStep() {
  base::Stopwatch watch;
  StepPlan plan = scheduler_.Schedule();
  const int64_t now = base::MonotonicNanos();
  for (const ScheduledChunk& c : plan.chunks) {
    auto it = pending_.find(c.request_id);
    if (it != pending_.end() && it->second->timings.first_scheduled_ns == 0) {
      it->second->timings.first_scheduled_ns = now;
    }
  }
  base::StatusOr<StepOutput> output = plan.empty() ? StepOutput{} : runner_->Execute(plan);
  if (!output.ok()) {
    LOG_ERROR("engine step {} failed: {}", plan.step, output.status().ToString());
    scheduler_.DiscardStep();
    for (const ScheduledChunk& c : plan.chunks) {
      if (auto r = scheduler_.Abort(c.request_id, output.status())) Complete(std::move(*r));
    }
  } else {
    StepUpdate update = scheduler_.Update(plan, *output);
    const int64_t step_end = base::MonotonicNanos();
    for (const TokenEvent& e : update.tokens) {
      auto it = pending_.find(e.request_id);
      if (it == pending_.end()) continue;
      Pending& p = *it->second;
      if (p.timings.first_token_ns == 0) p.timings.first_token_ns = step_end;
      if (p.last_token_step != plan.step) {
        p.timings.token_step_ns.push_back(step_end);
        p.last_token_step = plan.step;
      }
      if (p.on_token) p.on_token(e);
    }
    for (RequestResult& r : update.finished) Complete(std::move(r));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  RefreshCountersLocked();
  counters_.busy_seconds += watch.ElapsedSeconds();
  return !plan.empty();
}

void Engine::RefreshCountersLocked() {
  const SchedulerStats s = scheduler_.Stats();
  counters_.steps = s.num_steps;
  counters_.preemptions = s.num_preemptions;
  counters_.generated_tokens = s.num_generated_tokens;
  counters_.running_sequences = s.num_running;
  counters_.waiting_sequences = s.num_waiting;
  counters_.free_blocks = s.num_free_blocks;
  counters_.total_blocks = s.num_blocks;
}

void Engine::Loop() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || scheduler_.HasUnfinished();
      });
      if (stopping_) break;
    }
    DrainInbox();
    if (scheduler_.HasUnfinished() && !RunStep()) {
      // Nothing could run (should not happen: the best-ranked request always fits); wait for
      // input instead of spinning.
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait_for(lock, std::chrono::milliseconds(1),
                   [this] { return stopping_ || !inbox_.empty() || !cancels_.empty(); });
    }
  }
  DrainInbox();
  std::vector<RequestId> ids;
  for (const auto& [id, p] : pending_) ids.push_back(id);
  for (RequestId id : ids) {
    if (auto r = scheduler_.Cancel(id)) Complete(std::move(*r));
  }
}

}  // namespace deepinfer::engine

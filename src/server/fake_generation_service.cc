#include "server/fake_generation_service.h"

#include <fmt/format.h>

#include <algorithm>

namespace deepinfer::server {

FakeGenerationService::FakeGenerationService(FakeGenerationOptions options)
    : options_(std::move(options)), worker_([this] { Loop(); }) {}

FakeGenerationService::~FakeGenerationService() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

base::StatusOr<int64_t> FakeGenerationService::Submit(GenerationRequest request,
                                                      std::shared_ptr<GenerationSink> sink) {
  const auto prompt_size = static_cast<int64_t>(request.prompt.size());
  if (prompt_size + request.params.max_tokens > options_.context_length) {
    return base::InvalidArgumentError(fmt::format(
        "prompt ({} tokens) plus max_tokens ({}) exceeds the context length of {} tokens",
        prompt_size, request.params.max_tokens, options_.context_length));
  }
  Active active;
  active.script = options_.script ? options_.script(request.prompt) : std::vector<TokenId>{};
  active.request = std::move(request);
  active.sink = std::move(sink);
  int64_t id = 0;
  {
    std::lock_guard lock(mutex_);
    id = next_id_++;
    active_.emplace(id, std::move(active));
  }
  submitted_count_.fetch_add(1);
  wake_.notify_all();
  return id;
}

void FakeGenerationService::Cancel(int64_t id) {
  std::lock_guard lock(mutex_);
  if (auto it = active_.find(id); it != active_.end()) it->second.cancel = true;
  wake_.notify_all();
}

GenerationStats FakeGenerationService::Stats() const {
  std::lock_guard lock(mutex_);
  GenerationStats stats;
  stats.running = static_cast<int64_t>(active_.size());
  return stats;
}

void FakeGenerationService::Loop() {
  std::unique_lock lock(mutex_);
  while (true) {
    wake_.wait(lock, [this] { return stop_ || !active_.empty(); });
    if (stop_) break;
    // One step: one token for each active request; finished ones are reported afterwards.
    struct Emit {
      std::shared_ptr<GenerationSink> sink;
      std::optional<TokenId> token;
      std::optional<GenerationFinish> finish;
    };
    std::vector<Emit> emits;
    for (auto it = active_.begin(); it != active_.end();) {
      Active& a = it->second;
      Emit emit{a.sink, std::nullopt, std::nullopt};
      if (a.cancel) {
        emit.finish = GenerationFinish::kCancelled;
        cancelled_count_.fetch_add(1);
      } else if (a.emitted >= a.script.size()) {
        emit.finish = GenerationFinish::kStop;
      } else {
        const TokenId token = a.script[a.emitted++];
        emit.token = token;
        const auto& stops = a.request.params.stop_token_ids;
        if (!a.request.params.ignore_eos &&
            std::find(stops.begin(), stops.end(), token) != stops.end()) {
          emit.finish = GenerationFinish::kStop;
        } else if (static_cast<int>(a.emitted) >= a.request.params.max_tokens) {
          emit.finish = GenerationFinish::kLength;
        }
      }
      const bool done = emit.finish.has_value();
      emits.push_back(std::move(emit));
      it = done ? active_.erase(it) : std::next(it);
    }
    lock.unlock();
    for (Emit& emit : emits) {
      if (emit.token) emit.sink->OnTokens(std::span<const TokenId>(&*emit.token, 1));
      if (emit.finish) emit.sink->OnFinish(*emit.finish, base::Status::Ok());
    }
    emits.clear();
    if (options_.step_interval.count() > 0) std::this_thread::sleep_for(options_.step_interval);
    lock.lock();
  }
  // Shutdown: every unfinished request is cancelled.
  for (auto& [id, a] : active_) {
    lock.unlock();
    a.sink->OnFinish(GenerationFinish::kCancelled, base::Status::Ok());
    lock.lock();
  }
  active_.clear();
}

}  // namespace deepinfer::server

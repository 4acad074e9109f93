#include "server/engine_service.h"

#include <fmt/format.h>

#include <vector>

namespace deepinfer::server {
namespace {

GenerationFinish ToFinish(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kStop:
      return GenerationFinish::kStop;
    case engine::FinishReason::kLength:
      return GenerationFinish::kLength;
    case engine::FinishReason::kCancelled:
      return GenerationFinish::kCancelled;
    default:
      return GenerationFinish::kError;
  }
}

}  // namespace

void EngineGenerationService::Entry::OnToken(const engine::TokenEvent& event) {
  std::lock_guard lock(mutex);
  if (finished || event.sample_index != 0) return;
  const TokenId token = event.token;
  sink->OnTokens(std::span<const TokenId>(&token, 1));
  if (event.finish_reason != engine::FinishReason::kNone) {
    finished = true;
    sink->OnFinish(ToFinish(event.finish_reason), base::Status::Ok());
  }
}

void EngineGenerationService::Entry::FinishOnce(GenerationFinish finish,
                                                const base::Status& status) {
  std::lock_guard lock(mutex);
  if (finished) return;
  finished = true;
  sink->OnFinish(finish, status);
}

EngineGenerationService::EngineGenerationService(engine::Engine* engine,
                                                 EngineServiceOptions options)
    : engine_(engine), options_(options), reaper_([this] { Reap(); }) {}

EngineGenerationService::~EngineGenerationService() {
  stop_ = true;
  reaper_.join();
}

base::StatusOr<int64_t> EngineGenerationService::Submit(GenerationRequest request,
                                                        std::shared_ptr<GenerationSink> sink) {
  const auto prompt = static_cast<int64_t>(request.prompt.size());
  if (prompt + request.params.max_tokens > options_.max_model_len) {
    return base::InvalidArgumentError(fmt::format(
        "prompt ({} tokens) plus max_tokens ({}) exceeds the context length of {} tokens", prompt,
        request.params.max_tokens, options_.max_model_len));
  }
  engine::Request r;
  r.prompt = std::move(request.prompt);
  const GenerationParams& p = request.params;
  r.params.max_tokens = p.max_tokens;
  r.params.temperature = p.temperature;
  r.params.top_p = p.top_p;
  r.params.top_k = p.top_k;
  r.params.min_p = p.min_p;
  r.params.presence_penalty = p.presence_penalty;
  r.params.frequency_penalty = p.frequency_penalty;
  r.params.repetition_penalty = p.repetition_penalty;
  r.params.seed = p.seed;
  r.params.stop_token_ids = p.stop_token_ids;
  r.params.ignore_eos = p.ignore_eos;
  auto entry = std::make_shared<Entry>();
  entry->sink = std::move(sink);
  // The map lock is held across Submit so the reaper cannot see the future before it is
  // tracked; token callbacks only take the entry's lock.
  std::lock_guard lock(mutex_);
  engine::Submission submission =
      engine_->Submit(std::move(r), [entry](const engine::TokenEvent& e) { entry->OnToken(e); });
  tracked_.emplace(submission.id, Tracked{entry, std::move(submission.result)});
  return submission.id;
}

void EngineGenerationService::Cancel(int64_t id) { engine_->Cancel(id); }

GenerationStats EngineGenerationService::Stats() const {
  const engine::EngineCounters c = engine_->Counters();
  GenerationStats stats;
  stats.running = c.running_sequences;
  stats.waiting = c.waiting_sequences;
  stats.state_memory_total_bytes = static_cast<int64_t>(c.total_blocks) * options_.block_bytes;
  stats.state_memory_used_bytes =
      static_cast<int64_t>(c.total_blocks - c.free_blocks) * options_.block_bytes;
  return stats;
}

void EngineGenerationService::Reap() {
  while (!stop_.load()) {
    std::vector<std::pair<std::shared_ptr<Entry>, engine::EngineResult>> done;
    {
      std::lock_guard lock(mutex_);
      for (auto it = tracked_.begin(); it != tracked_.end();) {
        if (it->second.result.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
          done.emplace_back(it->second.entry, it->second.result.get());
          it = tracked_.erase(it);
        } else {
          ++it;
        }
      }
    }
    for (auto& [entry, result] : done) {
      const auto& samples = result.result.samples;
      if (!result.result.status.ok()) {
        const bool cancelled = result.result.status.code() == base::StatusCode::kCancelled;
        entry->FinishOnce(cancelled ? GenerationFinish::kCancelled : GenerationFinish::kError,
                          result.result.status);
      } else if (samples.empty()) {
        entry->FinishOnce(GenerationFinish::kError, base::InternalError("no sample"));
      } else {
        entry->FinishOnce(ToFinish(samples[0].finish_reason), base::Status::Ok());
      }
    }
    std::this_thread::sleep_for(options_.poll_interval);
  }
  // Engine gone or going: whatever is left is cancelled.
  std::lock_guard lock(mutex_);
  for (auto& [id, tracked] : tracked_) {
    tracked.entry->FinishOnce(GenerationFinish::kCancelled, base::Status::Ok());
  }
  tracked_.clear();
}

}  // namespace deepinfer::server

#include "engine/scheduler.h"

#include <algorithm>

#include "base/check.h"
#include "engine/sampling.h"
#include "fmt/format.h"

namespace deepinfer::engine {

struct Scheduler::RequestState {
  Request request;
  uint64_t arrival = 0;
  uint64_t seed = 0;
  bool forked = false;  // n > 1: children created
  int unfinished = 0;   // samples not finished (children not yet forked included)
  std::vector<std::unique_ptr<Sequence>> seqs;
};

struct Scheduler::Sequence {
  SeqId id = 0;
  RequestState* req = nullptr;
  int sample_index = 0;
  std::vector<TokenId> tokens;  // prompt + generated
  std::vector<float> logprobs;
  std::vector<std::vector<TokenLogprob>> top_logprobs;
  int64_t num_computed = 0;  // tokens whose state is held (while allocated)
  bool allocated = false;    // holds a slot and blocks in the StateManager
  FinishReason finish = FinishReason::kNone;
  int64_t scheduled_step = -1;
  int64_t preempted_step = -1;

  int64_t prompt_len() const { return static_cast<int64_t>(req->request.prompt.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t num_generated() const { return num_tokens() - prompt_len(); }
  int64_t remaining() const { return num_tokens() - num_computed; }
};

namespace {

// True if `a` ranks before `b` (priority desc, arrival asc, sample index asc).
template <typename Seq>
bool Better(const Seq& a, const Seq& b) {
  if (a.req->request.priority != b.req->request.priority) {
    return a.req->request.priority > b.req->request.priority;
  }
  if (a.req->arrival != b.req->arrival) return a.req->arrival < b.req->arrival;
  return a.sample_index < b.sample_index;
}

bool Contains(const std::vector<TokenId>& ids, TokenId t) {
  return std::find(ids.begin(), ids.end(), t) != ids.end();
}

}  // namespace

base::Status SchedulerConfig::Validate(int32_t num_slots) const {
  if (max_tokens_per_step < 1 || max_tokens_per_step < num_slots) {
    return base::InvalidArgumentError(
        fmt::format("max_tokens_per_step {} must be >= 1 and >= the number of state slots {}",
                    max_tokens_per_step, num_slots));
  }
  if (max_model_len < 2) return base::InvalidArgumentError("max_model_len must be >= 2");
  if (vocab_size < 1) return base::InvalidArgumentError("vocab_size must be >= 1");
  return base::Status::Ok();
}

Scheduler::Scheduler(const SchedulerConfig& config, kv::StateManager* kv)
    : config_(config), kv_(kv) {
  CHECK(kv_ != nullptr);
  CHECK_OK(config_.Validate(kv_->num_slots()));
}

Scheduler::~Scheduler() = default;

base::Status Scheduler::AddRequest(Request request) {
  CHECK(!in_step_) << "AddRequest between Schedule and Update";
  const RequestId id = request.id;
  const auto fail = [id](base::Status s) { return s.WithContext(fmt::format("request {}", id)); };
  if (requests_.count(id)) return fail(base::AlreadyExistsError("duplicate request id"));
  if (request.prompt.empty()) return fail(base::InvalidArgumentError("empty prompt"));
  for (TokenId t : request.prompt) {
    if (t < 0 || t >= config_.vocab_size) {
      return fail(base::InvalidArgumentError(
          fmt::format("prompt token id {} outside the vocabulary [0, {})", t, config_.vocab_size)));
    }
  }
  DI_RETURN_IF_ERROR(fail(request.params.Validate(config_.vocab_size)));
  const int64_t prompt_len = static_cast<int64_t>(request.prompt.size());
  if (prompt_len >= config_.max_model_len) {
    return fail(base::InvalidArgumentError(
        fmt::format("prompt of {} tokens leaves no room under max_model_len {}", prompt_len,
                    config_.max_model_len)));
  }
  const int n = request.params.n;
  const int64_t max_len =
      std::min<int64_t>(prompt_len + request.params.max_tokens, config_.max_model_len);
  const int64_t blocks = int64_t{n} * kv_->BlocksForTokens(max_len);
  if (n > kv_->num_slots() || blocks > kv_->num_blocks()) {
    return fail(base::ResourceExhaustedError(
        fmt::format("needs {} state slots and up to {} blocks; the engine has {} and {}", n, blocks,
                    kv_->num_slots(), kv_->num_blocks())));
  }
  auto req = std::make_unique<RequestState>();
  req->arrival = next_arrival_++;
  req->seed = request.params.seed.value_or(Mix64(config_.seed ^ Mix64(static_cast<uint64_t>(id))));
  req->unfinished = n;
  req->request = std::move(request);
  auto seq = std::make_unique<Sequence>();
  seq->id = next_seq_id_++;
  seq->req = req.get();
  seq->tokens = req->request.prompt;
  seqs_[seq->id] = seq.get();
  req->seqs.push_back(std::move(seq));
  requests_[id] = std::move(req);
  return base::Status::Ok();
}

std::vector<Scheduler::Sequence*> Scheduler::SortedUnfinished() const {
  std::vector<Sequence*> out;
  out.reserve(seqs_.size());
  for (const auto& [id, seq] : seqs_) out.push_back(seq);
  std::sort(out.begin(), out.end(),
            [](const Sequence* a, const Sequence* b) { return Better(*a, *b); });
  return out;
}

Scheduler::Sequence* Scheduler::WorstPreemptible(const Sequence& than,
                                                 const std::vector<Sequence*>& ordered) const {
  for (auto it = ordered.rbegin(); it != ordered.rend(); ++it) {
    Sequence* s = *it;
    if (s == &than || !Better(than, *s)) return nullptr;  // the rest rank before `than`
    if (s->allocated && s->scheduled_step != step_) return s;
  }
  return nullptr;
}

void Scheduler::Preempt(Sequence* seq) {
  kv_->Free(seq->id);
  seq->allocated = false;
  seq->num_computed = 0;
  seq->preempted_step = step_;
  ++stats_.num_preemptions;
}

bool Scheduler::EnsureCapacity(Sequence* seq, int64_t num_tokens, int32_t extra_slots,
                               int32_t extra_blocks, const std::vector<Sequence*>& ordered) {
  while (true) {
    const int32_t table_blocks =
        seq->allocated ? kv_->BlocksNeeded(seq->id, num_tokens) : kv_->BlocksForTokens(num_tokens);
    const bool fits = extra_slots <= kv_->num_free_slots() &&
                      table_blocks + extra_blocks <= kv_->num_free_blocks();
    if (fits) return true;
    Sequence* victim = WorstPreemptible(*seq, ordered);
    if (victim == nullptr) return false;
    if (victim->remaining() == 1) --decode_reserve_;  // its reserved decode token is free
    Preempt(victim);
  }
}

std::vector<SampleTarget> Scheduler::ForkIfComplete(Sequence* seq, int64_t end, StepPlan* plan) {
  RequestState* req = seq->req;
  const int n = req->request.params.n;
  if (n == 1 || req->forked) return {{seq->id, seq->sample_index, req->seed}};
  CHECK_EQ(end, seq->prompt_len());
  const int32_t children = n - 1;
  const std::vector<Sequence*> ordered = SortedUnfinished();
  if (!EnsureCapacity(seq, end, children, children * kv_->ForkBlocksNeeded(end), ordered)) {
    return {};
  }
  std::vector<SampleTarget> samples = {{seq->id, seq->sample_index, req->seed}};
  for (int i = 1; i < n; ++i) {
    auto child = std::make_unique<Sequence>();
    child->id = next_seq_id_++;
    child->req = req;
    child->sample_index = i;
    child->tokens = req->request.prompt;
    auto copy = kv_->Fork(seq->id, child->id, end);
    CHECK(copy.ok()) << copy.status();
    plan->copies_after.push_back(*copy);
    child->allocated = true;
    child->scheduled_step = step_;
    samples.push_back({child->id, i, req->seed});
    seqs_[child->id] = child.get();
    req->seqs.push_back(std::move(child));
  }
  req->forked = true;
  return samples;
}

void Scheduler::AppendChunk(Sequence* seq, int64_t num_tokens, std::vector<SampleTarget> samples,
                            StepPlan* plan) {
  ScheduledChunk c;
  c.request_id = seq->req->request.id;
  c.seq_id = seq->id;
  c.slot = kv_->slot(seq->id);
  c.start_position = seq->num_computed;
  c.tokens.assign(seq->tokens.begin() + seq->num_computed,
                  seq->tokens.begin() + seq->num_computed + num_tokens);
  c.block_table = kv_->block_table(seq->id);
  c.samples = std::move(samples);
  c.params = &seq->req->request.params;
  c.prompt = seq->req->request.prompt;
  c.output = std::span<const TokenId>(seq->tokens).subspan(static_cast<size_t>(seq->prompt_len()));
  seq->scheduled_step = step_;
  (num_tokens == 1 ? stats_.num_decode_tokens : stats_.num_prefill_tokens) += num_tokens;
  plan->chunks.push_back(std::move(c));
}

int64_t Scheduler::TrySchedule(Sequence* seq, int64_t max_tokens,
                               const std::vector<Sequence*>& ordered, StepPlan* plan) {
  const bool is_new = !seq->allocated;
  const int64_t start = seq->num_computed;
  int64_t chunk = std::min(seq->remaining(), max_tokens);
  if (!EnsureCapacity(seq, start + chunk, is_new ? 1 : 0, 0, ordered)) {
    // Take what fits in the free memory, if anything.
    if (is_new && kv_->num_free_slots() == 0) return 0;
    const int64_t have = is_new ? 0 : static_cast<int64_t>(kv_->block_table(seq->id).size());
    chunk = std::min(chunk, (have + kv_->num_free_blocks()) * kv_->block_tokens() - start);
    if (chunk <= 0) {
      if (!is_new && seq->remaining() == 1) Preempt(seq);  // a stalled decode frees its state
      return 0;
    }
  }
  if (is_new) {
    CHECK_OK(kv_->Add(seq->id));
    seq->allocated = true;
  }
  CHECK(kv_->Reserve(seq->id, start + chunk));
  std::vector<SampleTarget> samples;
  if (start + chunk == seq->num_tokens()) {
    samples = ForkIfComplete(seq, start + chunk, plan);
    if (samples.empty()) --chunk;  // cannot fork yet: run the prompt but the last token
  }
  if (chunk == 0) return 0;
  AppendChunk(seq, chunk, std::move(samples), plan);
  return chunk;
}

StepPlan Scheduler::Schedule() {
  CHECK(!in_step_) << "Schedule called twice without Update";
  in_step_ = true;
  StepPlan plan;
  plan.step = step_;
  int64_t budget = config_.max_tokens_per_step;
  const std::vector<Sequence*> ordered = SortedUnfinished();
  // Budget for the decodes not yet visited, so prefill chunks never take it.
  decode_reserve_ = 0;
  for (const Sequence* s : ordered) decode_reserve_ += s->allocated && s->remaining() == 1;
  const auto prefill_cap = [&] { return budget - std::max<int64_t>(decode_reserve_, 0); };
  // 1. Running sequences in key order: memory goes to better keys first (a prefill of a
  //    higher-priority request may preempt worse decodes), the token budget to decodes first.
  for (Sequence* s : ordered) {
    if (!s->allocated || s->scheduled_step == step_) continue;
    if (s->remaining() == 1) {
      --decode_reserve_;
      budget -= TrySchedule(s, 1, ordered, &plan);
    } else if (prefill_cap() > 0) {
      budget -= TrySchedule(s, prefill_cap(), ordered, &plan);
    }
  }
  // 2. Admission in key order, no overtaking.
  for (Sequence* s : ordered) {
    if (prefill_cap() <= 0) break;
    if (s->allocated) continue;
    if (s->preempted_step == step_) break;
    const int64_t n = TrySchedule(s, prefill_cap(), ordered, &plan);
    if (n == 0) break;
    budget -= n;
  }
  ++step_;
  ++stats_.num_steps;
  return plan;
}

FinishReason Scheduler::StopReason(const Sequence& seq, TokenId token) const {
  const Request& r = seq.req->request;
  if (!r.params.ignore_eos && Contains(config_.eos_token_ids, token)) return FinishReason::kStop;
  if (Contains(r.params.stop_token_ids, token)) return FinishReason::kStop;
  const auto output =
      std::span<const TokenId>(seq.tokens).subspan(static_cast<size_t>(seq.prompt_len()));
  if (r.stop_hook && r.stop_hook(output)) return FinishReason::kStop;
  if (seq.num_generated() >= r.params.max_tokens) return FinishReason::kLength;
  if (seq.num_tokens() >= config_.max_model_len) return FinishReason::kLength;
  return FinishReason::kNone;
}

Scheduler::Sequence* Scheduler::FindSeq(SeqId id) const {
  auto it = seqs_.find(id);
  CHECK(it != seqs_.end()) << "sequence " << id << " is not live";
  return it->second;
}

StepUpdate Scheduler::Update(const StepPlan& plan, const StepOutput& output) {
  CHECK(in_step_) << "Update without Schedule";
  in_step_ = false;
  size_t num_targets = 0;
  for (const ScheduledChunk& c : plan.chunks) num_targets += c.samples.size();
  CHECK_EQ(output.tokens.size(), num_targets) << "runner output does not match the plan";
  StepUpdate update;
  size_t k = 0;
  for (const ScheduledChunk& chunk : plan.chunks) {
    Sequence* seq = FindSeq(chunk.seq_id);
    seq->num_computed = chunk.end_position();
    const auto computed = [](const Sequence* s) {
      return std::span<const TokenId>(s->tokens).first(static_cast<size_t>(s->num_computed));
    };
    kv_->Commit(seq->id, computed(seq));
    for (const SampleTarget& target : chunk.samples) {
      const SampledToken& st = output.tokens[k++];
      CHECK_EQ(st.seq_id, target.seq_id);
      CHECK(st.token >= 0 && st.token < config_.vocab_size) << "sampled id " << st.token;
      Sequence* t = FindSeq(target.seq_id);
      if (t != seq) {
        t->num_computed = seq->num_computed;
        kv_->Commit(t->id, computed(t));
      }
      t->tokens.push_back(st.token);
      const SamplingParams& p = t->req->request.params;
      if (p.logprobs || p.top_logprobs > 0) {
        t->logprobs.push_back(st.logprob);
        t->top_logprobs.push_back(st.top_logprobs);
      }
      ++stats_.num_generated_tokens;
      const FinishReason reason = StopReason(*t, st.token);
      update.tokens.push_back(
          {t->req->request.id, t->sample_index, st.token, st.logprob, st.top_logprobs, reason});
      if (reason != FinishReason::kNone) Finish(t, reason, &update);
    }
  }
  return update;
}

void Scheduler::DiscardStep() {
  CHECK(in_step_) << "DiscardStep without Schedule";
  in_step_ = false;
}

void Scheduler::Finish(Sequence* seq, FinishReason reason, StepUpdate* update) {
  seq->finish = reason;
  if (seq->allocated) kv_->Free(seq->id);
  seq->allocated = false;
  seqs_.erase(seq->id);
  RequestState* req = seq->req;
  if (--req->unfinished == 0) update->finished.push_back(TakeResult(req));
}

RequestResult Scheduler::TakeResult(RequestState* req) {
  RequestResult result;
  result.id = req->request.id;
  result.samples.resize(static_cast<size_t>(req->request.params.n));
  for (int i = 0; i < req->request.params.n; ++i) result.samples[static_cast<size_t>(i)].index = i;
  for (const auto& seq : req->seqs) {
    SampleResult& s = result.samples[static_cast<size_t>(seq->sample_index)];
    s.tokens.assign(seq->tokens.begin() + seq->prompt_len(), seq->tokens.end());
    s.logprobs = seq->logprobs;
    s.top_logprobs = seq->top_logprobs;
    s.finish_reason = seq->finish;
    seqs_.erase(seq->id);
  }
  requests_.erase(req->request.id);  // destroys req
  return result;
}

std::optional<RequestResult> Scheduler::End(RequestId id, FinishReason reason,
                                            const base::Status& status) {
  CHECK(!in_step_) << "Cancel/Abort between Schedule and Update";
  auto it = requests_.find(id);
  if (it == requests_.end()) return std::nullopt;
  RequestState* req = it->second.get();
  for (const auto& seq : req->seqs) {
    if (seq->finish != FinishReason::kNone) continue;
    seq->finish = reason;
    if (seq->allocated) kv_->Free(seq->id);
    seq->allocated = false;
  }
  RequestResult result = TakeResult(req);
  for (SampleResult& s : result.samples) {
    if (s.finish_reason == FinishReason::kNone) s.finish_reason = reason;  // never forked
  }
  result.status = status;
  return result;
}

std::optional<RequestResult> Scheduler::Cancel(RequestId id) {
  return End(id, FinishReason::kCancelled, base::Status::Ok());
}

std::optional<RequestResult> Scheduler::Abort(RequestId id, const base::Status& status) {
  return End(id, FinishReason::kAborted, status);
}

SchedulerStats Scheduler::Stats() const {
  SchedulerStats s = stats_;
  s.num_waiting = 0;
  s.num_running = 0;
  for (const auto& [id, seq] : seqs_) (seq->allocated ? s.num_running : s.num_waiting) += 1;
  s.num_free_blocks = kv_->num_free_blocks();
  s.num_blocks = kv_->num_blocks();
  return s;
}

}  // namespace deepinfer::engine

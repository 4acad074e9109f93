#include "engine/sampling.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>
#include <optional>
#include <unordered_map>
#include <utility>

#include "base/check.h"
#include "fmt/format.h"

namespace deepinfer::engine {

uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

double CounterUniform(uint64_t seed, int sample_index, int64_t position) {
  uint64_t h = Mix64(seed);
  h = Mix64(h ^ static_cast<uint64_t>(sample_index));
  h = Mix64(h ^ static_cast<uint64_t>(position));
  return static_cast<double>(h >> 11) * 0x1.0p-53;
}

bool IsPlainGreedy(const SamplingParams& params) {
  return params.temperature == 0.0f && params.logit_bias.empty() &&
         params.repetition_penalty == 1.0f && params.frequency_penalty == 0.0f &&
         params.presence_penalty == 0.0f && !params.logprobs && params.top_logprobs <= 0;
}

void ApplyBiasAndPenalties(std::span<float> logits, const SamplingParams& params,
                           std::span<const TokenId> prompt, std::span<const TokenId> output) {
  const auto in_vocab = [&](TokenId t) {
    CHECK(t >= 0 && static_cast<size_t>(t) < logits.size()) << "token id " << t;
    return static_cast<size_t>(t);
  };
  for (const auto& [token, bias] : params.logit_bias) logits[in_vocab(token)] += bias;
  if (params.repetition_penalty != 1.0f) {
    // Once per distinct token of the prompt and output (only the history is walked).
    std::vector<bool> seen(logits.size(), false);
    const auto penalise = [&](TokenId token) {
      const size_t t = in_vocab(token);
      if (seen[t]) return;
      seen[t] = true;
      logits[t] = logits[t] > 0 ? logits[t] / params.repetition_penalty
                                : logits[t] * params.repetition_penalty;
    };
    for (TokenId t : prompt) penalise(t);
    for (TokenId t : output) penalise(t);
  }
  if (params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f) {
    std::unordered_map<TokenId, int> counts;
    for (TokenId t : output) ++counts[t];
    for (const auto& [t, count] : counts) {
      logits[in_vocab(t)] -=
          params.frequency_penalty * static_cast<float>(count) + params.presence_penalty;
    }
  }
}

namespace {

// Rows shorter than this sort their kept ids for the sampling walk; longer ones walk the row.
constexpr size_t kSortKeptLimit = 4096;
// First ranked prefix looked at by a top_p walk without top_k (see WalkRanked for growth).
constexpr size_t kInitialPrefix = 64;
// Ranked selections at least this long are radix sorted.
constexpr size_t kRadixSortMin = 2048;

// A ranking candidate: its value and id, compared without indirection.
struct Candidate {
  double value;
  TokenId id;
};

// Per-thread scratch: SampleToken runs on pool workers, one row per call.
struct Scratch {
  std::vector<float> logits;        // biased / penalised copy of the row
  std::vector<double> weights;      // exp((l - max) / temperature)
  std::vector<TokenId> ranked;      // most probable first
  std::vector<Candidate> buffer;    // ExtendRanking candidates
  std::vector<Candidate> sort_tmp;  // RadixSortByValue scratch
  std::vector<double> bucket_mass;  // CrossingBucket histogram
  std::vector<TokenId> kept;        // kept ids in id order
};

Scratch& ThreadScratch() {
  thread_local Scratch scratch;
  return scratch;
}

bool HasBiasOrPenalty(const SamplingParams& params) {
  return !params.logit_bias.empty() || params.repetition_penalty != 1.0f ||
         params.frequency_penalty != 0.0f || params.presence_penalty != 0.0f;
}

TokenId Argmax(std::span<const float> logits) {
  size_t best = 0;
  for (size_t t = 1; t < logits.size(); ++t) {
    if (logits[t] > logits[best]) best = t;
  }
  return static_cast<TokenId>(best);
}

// The ranking "value descending, ties by lower id": a strict total order.
bool RanksBefore(const Candidate& a, const Candidate& b) {
  return a.value > b.value || (a.value == b.value && a.id < b.id);
}

// Stable sort by value descending: an LSD radix sort (11-bit digits, constant digits
// skipped) on the order-preserving bits of the double. Candidates in id order come out in
// ranking order. `tmp` is scratch.
void RadixSortByValue(std::vector<Candidate>& c, std::vector<Candidate>& tmp) {
  const auto key = [](double v) {
    const uint64_t bits = std::bit_cast<uint64_t>(v == 0.0 ? 0.0 : v);  // -0 ranks as +0
    const uint64_t ascending = (bits >> 63) != 0 ? ~bits : bits | (uint64_t{1} << 63);
    return ~ascending;
  };
  constexpr int kBits = 11, kDigits = (64 + kBits - 1) / kBits;
  constexpr uint64_t kMask = (uint64_t{1} << kBits) - 1;
  std::vector<std::array<uint32_t, kMask + 1>> counts(kDigits);  // zeroed
  for (const Candidate& x : c) {
    const uint64_t k = key(x.value);
    for (int d = 0; d < kDigits; ++d) ++counts[d][(k >> (kBits * d)) & kMask];
  }
  tmp.resize(c.size());
  for (int d = 0; d < kDigits; ++d) {
    std::array<uint32_t, kMask + 1>& start = counts[d];
    const auto digit = [&](const Candidate& x) { return (key(x.value) >> (kBits * d)) & kMask; };
    if (start[digit(c[0])] == c.size()) continue;  // one digit value: nothing moves
    uint32_t offset = 0;
    for (uint32_t& bucket : start) offset += std::exchange(bucket, offset);
    for (const Candidate& x : c) tmp[start[digit(x)]++] = x;
    c.swap(tmp);
  }
}

// Sorts s.buffer in ranking order (a stable radix sort when long: then it must be in id
// order) and appends its ids to s.ranked.
void AppendSorted(Scratch& s, bool in_id_order) {
  if (in_id_order && s.buffer.size() >= kRadixSortMin) {
    RadixSortByValue(s.buffer, s.sort_tmp);
  } else {
    std::sort(s.buffer.begin(), s.buffer.end(), RanksBefore);
  }
  for (const Candidate& c : s.buffer) s.ranked.push_back(c.id);
}

// The ranking of the ids [0, n) by value(t) (a double). s.ranked holds its first
// s.ranked.size() ids; this appends (at least) the next min(count, rest) in order: all of the
// rest when count is at least half of it (one sort instead of more rounds). One pass over
// the row keeping at most 2 * count candidates (std::nth_element halves them whenever
// full); only the selected candidates are sorted (radix sorted when many).
template <class Value>
void ExtendRanking(size_t n, const Value& value, size_t count, Scratch& s) {
  if (count == 0 || s.ranked.size() >= n) return;
  const size_t rest = n - s.ranked.size();
  if (count >= rest / 2) count = rest;
  const bool has_last = !s.ranked.empty();
  const Candidate last =
      has_last ? Candidate{value(s.ranked.back()), s.ranked.back()} : Candidate{0.0, -1};
  const auto after_last = [&](const Candidate& c) { return !has_last || RanksBefore(last, c); };
  std::vector<Candidate>& buffer = s.buffer;
  const auto keep_best = [&] {
    std::nth_element(buffer.begin(), buffer.begin() + static_cast<ptrdiff_t>(count - 1),
                     buffer.end(), RanksBefore);
    buffer.resize(count);
  };
  bool has_cut = false;
  double cut = 0.0;  // with has_cut: the count-th best value so far (of an earlier id)
  buffer.clear();
  for (size_t i = 0; i < n; ++i) {
    const Candidate c{value(static_cast<TokenId>(i)), static_cast<TokenId>(i)};
    if (has_cut && !(c.value > cut)) continue;
    if (!after_last(c)) continue;
    buffer.push_back(c);
    if (buffer.size() == 2 * count) {
      keep_best();
      cut = buffer.back().value;
      has_cut = true;
    }
  }
  const bool in_id_order = !has_cut && buffer.size() <= count;
  if (buffer.size() > count) keep_best();
  if (!in_id_order && buffer.size() >= kRadixSortMin) {
    // The selected are exactly the ids after `last` ranking no later than the worst of
    // them: collect them again, in id order, for the stable radix sort.
    const Candidate worst = *std::max_element(buffer.begin(), buffer.end(), RanksBefore);
    buffer.clear();
    for (size_t i = 0; i < n; ++i) {
      const Candidate c{value(static_cast<TokenId>(i)), static_cast<TokenId>(i)};
      if (after_last(c) && !RanksBefore(worst, c)) buffer.push_back(c);
    }
  }
  AppendSorted(s, /*in_id_order=*/buffer.size() >= kRadixSortMin);
}

// w[t] = exp((l[t] - max l) / temperature) in double (so the most probable weighs exactly
// 1); returns their sum in id order. The probabilities of step 6 are w / sum.
double FillWeights(std::span<const float> logits, float temperature, std::vector<double>& w) {
  const double inv_t = 1.0 / static_cast<double>(temperature);
  const double max = *std::max_element(logits.begin(), logits.end());
  w.resize(logits.size());
  double sum = 0.0;
  for (size_t t = 0; t < logits.size(); ++t) {
    w[t] = std::exp((static_cast<double>(logits[t]) - max) * inv_t);
    sum += w[t];
  }
  return sum;
}

// The tokens kept by steps 7-9, in one of three forms.
struct Kept {
  enum class Kind { kAll, kMinWeight, kRanked } kind = Kind::kAll;
  double min_weight = 0.0;          // kMinWeight: kept iff w >= min_weight
  std::span<const TokenId> ranked;  // kRanked: the kept ids, most probable first
  bool Contains(std::span<const double> w, TokenId t) const;
};

bool Kept::Contains(std::span<const double> w, TokenId t) const {
  if (kind == Kind::kAll) return true;
  const double v = w[static_cast<size_t>(t)];
  if (kind == Kind::kMinWeight) return v >= min_weight;
  // A ranked prefix is exactly the ids ranking no later than its last one.
  const TokenId last = ranked.back();
  const double last_v = w[static_cast<size_t>(last)];
  return (v > last_v) | ((v == last_v) & (t <= last));  // branch-free
}

// Weights in [0, 1] bucketed by their top bits (exponent and 2 mantissa bits): buckets
// are in weight order, so the heaviest buckets hold the first tokens of the ranking.
constexpr int kMantissaBucketBits = 2;
constexpr size_t kWeightBuckets = size_t{1024} << kMantissaBucketBits;

size_t WeightBucket(double w) {
  const uint64_t bucket = std::bit_cast<uint64_t>(w) >> (52 - kMantissaBucketBits);
  return std::min<size_t>(bucket, kWeightBuckets - 1);
}

// The lowest bucket a top_p walk to `target` reaches, from a histogram of the weights (the
// histogram's sums differ from the walk's only in rounding, so the walk may need more).
size_t CrossingBucket(std::span<const double> w, double target, Scratch& s) {
  s.bucket_mass.assign(kWeightBuckets, 0.0);
  for (double v : w) s.bucket_mass[WeightBucket(v)] += v;
  double mass = 0.0;
  size_t b = kWeightBuckets;
  while (b > 0 && mass < target) mass += s.bucket_mass[--b];
  return b;
}

// Appends to s.ranked, in order, every token after its last one whose weight bucket is >= b
// (the buckets being in weight order, these continue the ranking).
void RankFromBucket(std::span<const double> w, size_t b, Scratch& s) {
  const TokenId last = s.ranked.back();
  const Candidate last_c{w[static_cast<size_t>(last)], last};
  s.buffer.clear();
  for (size_t i = 0; i < w.size(); ++i) {
    const Candidate c{w[i], static_cast<TokenId>(i)};
    if (WeightBucket(c.value) >= b && RanksBefore(last_c, c)) s.buffer.push_back(c);
  }
  AppendSorted(s, /*in_id_order=*/true);
}

// Length of the kept prefix of `ranked` (grown on demand when `grow`): the walk stops after
// the element whose cumulative weight (most probable first) reaches `target`, or before the
// first element under `min_weight` (min_p; the first element weighs 1 >= min_weight).
// Growth: kInitialPrefix, then the weight buckets the histogram says the walk reaches, then
// x4.
size_t WalkRanked(std::span<const double> w, double target, double min_weight, bool grow,
                  Scratch& s) {
  const auto weight = [&](TokenId t) { return w[static_cast<size_t>(t)]; };
  double cum = 0.0;
  size_t i = 0;
  bool estimated = false;
  while (true) {
    if (i == s.ranked.size()) {
      if (!grow || s.ranked.size() == w.size()) return i;
      const size_t ranked = s.ranked.size();
      if (ranked > 0 && !estimated) {
        RankFromBucket(w, CrossingBucket(w, target, s), s);
        estimated = true;
      }
      if (s.ranked.size() == ranked) {
        ExtendRanking(w.size(), weight, ranked == 0 ? kInitialPrefix : 3 * ranked, s);
      }
    }
    const double v = weight(s.ranked[i]);
    if (v < min_weight) return i;
    cum += v;
    ++i;
    if (cum >= target) return i;
  }
}

// Steps 7-9 on weights w (sum `total`, id order). May leave the ranked prefix in s.ranked.
Kept KeptTokens(std::span<const double> w, double total, const SamplingParams& params, Scratch& s) {
  const size_t n = w.size();
  const bool top_k = params.top_k > 0 && static_cast<size_t>(params.top_k) < n;
  const bool top_p = params.top_p < 1.0f;
  const double min_weight = static_cast<double>(params.min_p);  // times the max weight, 1
  Kept kept;
  if (!top_k && !top_p) {
    if (params.min_p > 0.0f) kept = {Kept::Kind::kMinWeight, min_weight, {}};
    return kept;
  }
  s.ranked.clear();
  size_t keep = 0;
  if (top_k) {
    const auto weight = [&](TokenId t) { return w[static_cast<size_t>(t)]; };
    ExtendRanking(n, weight, static_cast<size_t>(params.top_k), s);
    CHECK_GE(s.ranked.size(), static_cast<size_t>(params.top_k));
    s.ranked.resize(static_cast<size_t>(params.top_k));       // it may rank more
    double target = std::numeric_limits<double>::infinity();  // no top_p: keep all k
    if (top_p) {
      double mass = 0.0;  // over the top_k prefix, most probable first
      for (TokenId t : s.ranked) mass += w[static_cast<size_t>(t)];
      target = static_cast<double>(params.top_p) * mass;
    }
    keep = WalkRanked(w, target, min_weight, /*grow=*/false, s);
  } else {
    keep = WalkRanked(w, static_cast<double>(params.top_p) * total, min_weight, /*grow=*/true, s);
  }
  CHECK_GE(keep, 1u);
  return {Kept::Kind::kRanked, 0.0, std::span<const TokenId>(s.ranked.data(), keep)};
}

// Step 10 over the ids `ids` yields in increasing order, kept(t) saying which are kept: the
// first kept token whose cumulative weight exceeds u * kept mass; the last positive kept
// token when rounding leaves the walk short. Branch-free sums: adding 0 for a removed or
// zero-weight token leaves the sums exactly as skipping it.
template <class Ids, class IsKept>
TokenId DrawOver(std::span<const double> w, const Ids& ids, const IsKept& kept,
                 std::optional<double> kept_mass, double u) {
  const auto kept_weight = [&](TokenId t) {
    const double v = w[static_cast<size_t>(t)];
    return kept(t) && v > 0.0 ? v : 0.0;
  };
  double mass = 0.0;
  if (kept_mass) {
    mass = *kept_mass;
  } else {
    ids([&](TokenId t) {
      mass += kept_weight(t);
      return false;
    });
  }
  const double target = u * mass;
  double cum = 0.0;
  TokenId token = -1;  // cum > target can only turn true on adding a positive weight
  ids([&](TokenId t) {
    cum += kept_weight(t);
    if (cum > target) token = t;
    return token >= 0;
  });
  if (token < 0) {
    ids([&](TokenId t) {
      if (kept_weight(t) > 0.0) token = t;
      return false;
    });
  }
  CHECK_GE(token, 0) << "no token kept";
  return token;
}

TokenId Draw(std::span<const double> w, double total, const Kept& kept, double u, Scratch& s) {
  if (kept.kind == Kept::Kind::kRanked && kept.ranked.size() <= kSortKeptLimit) {
    s.kept.assign(kept.ranked.begin(), kept.ranked.end());
    std::sort(s.kept.begin(), s.kept.end());
    const auto ids = [&](auto&& fn) {
      for (TokenId t : s.kept) {
        if (fn(t)) return;
      }
    };
    return DrawOver(
        w, ids, [](TokenId) { return true; }, std::nullopt, u);
  }
  const auto row = [&](auto&& fn) {
    for (size_t i = 0; i < w.size(); ++i) {
      if (fn(static_cast<TokenId>(i))) return;
    }
  };
  const std::optional<double> mass =
      kept.kind == Kept::Kind::kAll ? std::optional<double>(total) : std::nullopt;
  return DrawOver(
      w, row, [&](TokenId t) { return kept.Contains(w, t); }, mass, u);
}

// Raw log_softmax (double) of the sampled token and the top_logprobs list. `exp_sum`, when
// given, is sum(exp(raw - max raw)) in id order (the weights' sum at temperature 1 without
// bias or penalties: the same terms in the same order).
void FillLogprobs(std::span<const float> raw, const SamplingParams& params,
                  std::optional<double> exp_sum, Scratch& s, Sampled* out) {
  if (!params.logprobs && params.top_logprobs <= 0) return;
  const double max = *std::max_element(raw.begin(), raw.end());
  double sum = 0.0;
  if (exp_sum) {
    sum = *exp_sum;
  } else {
    for (float l : raw) sum += std::exp(static_cast<double>(l) - max);
  }
  const double log_sum = std::log(sum) + max;
  const auto logprob = [&](TokenId t) {
    return static_cast<double>(raw[static_cast<size_t>(t)]) - log_sum;
  };
  out->logprob = static_cast<float>(logprob(out->token));
  const int k = std::min<int>(params.top_logprobs, static_cast<int>(raw.size()));
  if (k <= 0) return;
  s.ranked.clear();
  ExtendRanking(raw.size(), logprob, static_cast<size_t>(k), s);
  CHECK_GE(s.ranked.size(), static_cast<size_t>(k));
  s.ranked.resize(static_cast<size_t>(k));  // it may rank more
  for (TokenId t : s.ranked) out->top_logprobs.push_back({t, static_cast<float>(logprob(t))});
}

}  // namespace

std::vector<double> TruncatedProbs(std::span<const float> logits, const SamplingParams& params) {
  Scratch& s = ThreadScratch();
  const double total = FillWeights(logits, params.temperature, s.weights);
  const std::span<const double> w = s.weights;
  const Kept kept = KeptTokens(w, total, params, s);
  std::vector<double> p(w.size(), 0.0);
  for (size_t t = 0; t < w.size(); ++t) {
    if (kept.Contains(w, static_cast<TokenId>(t))) p[t] = w[t] / total;
  }
  return p;
}

Sampled SampleToken(std::span<const float> logits, const SamplingParams& params,
                    const SampleContext& context) {
  CHECK(!logits.empty());
  Scratch& s = ThreadScratch();
  std::span<const float> work = logits;
  if (HasBiasOrPenalty(params)) {
    s.logits.assign(logits.begin(), logits.end());
    ApplyBiasAndPenalties(s.logits, params, context.prompt, context.output);
    work = s.logits;
  }
  Sampled out;
  std::optional<double> raw_exp_sum;
  if (params.temperature <= 0.0f) {
    out.token = Argmax(work);
  } else {
    const double total = FillWeights(work, params.temperature, s.weights);
    if (params.temperature == 1.0f && work.data() == logits.data()) raw_exp_sum = total;
    const Kept kept = KeptTokens(s.weights, total, params, s);
    const double u = CounterUniform(context.seed, context.sample_index, context.position);
    out.token = Draw(s.weights, total, kept, u, s);
  }
  FillLogprobs(logits, params, raw_exp_sum, s, &out);
  return out;
}

base::Status SamplingParams::Validate(int vocab_size) const {
  const auto bad = [](std::string_view field, auto value) {
    return base::InvalidArgumentError(
        fmt::format("sampling parameter {} = {} is out of range", field, value));
  };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature)) return bad("temperature", temperature);
  if (!(top_p > 0.0f && top_p <= 1.0f)) return bad("top_p", top_p);
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return bad("min_p", min_p);
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f)) {
    return bad("presence_penalty", presence_penalty);
  }
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f)) {
    return bad("frequency_penalty", frequency_penalty);
  }
  if (!(repetition_penalty > 0.0f) || !std::isfinite(repetition_penalty)) {
    return bad("repetition_penalty", repetition_penalty);
  }
  if (n < 1) return bad("n", n);
  if (max_tokens < 1) return bad("max_tokens", max_tokens);
  if (top_logprobs < 0 || top_logprobs > kMaxTopLogprobs) return bad("top_logprobs", top_logprobs);
  for (const auto& [token, bias] : logit_bias) {
    if (token < 0 || token >= vocab_size) return bad("logit_bias token id", token);
    if (!std::isfinite(bias)) return bad("logit_bias value", bias);
  }
  for (TokenId t : stop_token_ids) {
    if (t < 0 || t >= vocab_size) return bad("stop_token_ids entry", t);
  }
  return base::Status::Ok();
}

std::string_view FinishReasonName(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kAborted:
      return "aborted";
  }
  return "unknown";
}

}  // namespace deepinfer::engine

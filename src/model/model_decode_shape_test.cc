// Stable launch shape of decode steps: a GPU backend replays a captured step only when it
// issues the same backend calls with the same integer arguments and buffer sizes as an earlier
// step. A recording backend (every call forwarded to the CPU reference, its name and integer
// arguments logged) drives the golden checkpoints through a prompt longer than the window with
// more compressed entries than index_topk, then decode steps (one token per sequence, one and
// three sequences): each step must log exactly what the step two before logged (the ratio-2
// compressor pools every other token), except across a launch-bucket boundary
// (PagedBlockSlots / LaunchBucket, model_internal.h), which the test counts and bounds.
// Also: the buckets' values, and that padding the indexer's score rows with -inf columns
// leaves the candidate mask of the real columns and the top-k ids unchanged.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "model/golden_check.h"
#include "model/model.h"
#include "model/model_internal.h"
#include "model/state_blocks.h"

namespace deepinfer::model {
namespace {

const std::filesystem::path kGoldens = std::filesystem::path(DEEPINFER_SHARED_DIR) / "goldens/v41";

// Forwards every call to a CpuBackend. While a log is set, appends one line per call: the
// op's name and its integer arguments (sizes, counts, strides, weight names, which optional
// pointers are set), never addresses or float values: what a captured graph fixes.
// `paged` says whether the indexer reads keys in place (IndexerScoresPaged) or gathers them
// (IndexerScoresVarlen), and whether the attention reads the selected entries in place
// (SparseAttentionArgs::comp_bases) or after GatherSelectedRows. Routed experts run fused (as on
// the GPU), so that no call depends on the routing decisions; the fused op itself is emulated on
// the host with unlogged calls.
class RecordingBackend final : public Backend {
 public:
  explicit RecordingBackend(bool paged) : paged_(paged) {}
  void SetLog(std::vector<std::string>* log) { log_ = log; }

  std::string_view name() const override { return "recording-cpu"; }
  base::Status Synchronize() override { return cpu_.Synchronize(); }

  float* AllocFloats(int64_t n) override { return Note("AllocFloats", n), cpu_.AllocFloats(n); }
  int32_t* AllocInts(int64_t n) override { return Note("AllocInts", n), cpu_.AllocInts(n); }
  float* AllocUninitialized(int64_t n) override {
    return Note("AllocUninitialized", n), cpu_.AllocUninitialized(n);
  }
  void Free(void* p) override { Note("Free"), cpu_.Free(p); }
  float* AllocHostFloats(int64_t n) override {
    return Note("AllocHostFloats", n), cpu_.AllocHostFloats(n);
  }
  void FreeHostFloats(float* p) override { Note("FreeHostFloats"), cpu_.FreeHostFloats(p); }
  void CopyToDevice(void* dst, const void* src, int64_t bytes) override {
    Note("CopyToDevice", bytes), cpu_.CopyToDevice(dst, src, bytes);
  }
  void CopyToHost(void* dst, const void* src, int64_t bytes) override {
    Note("CopyToHost", bytes), cpu_.CopyToHost(dst, src, bytes);
  }
  void CopyDevice(void* dst, const void* src, int64_t bytes) override {
    Note("CopyDevice", bytes), cpu_.CopyDevice(dst, src, bytes);
  }
  // The list's length only: its byte counts are uploaded data.
  void CopyDeviceMany(const DeviceCopy* copies, int64_t n) override {
    Note("CopyDeviceMany", n), cpu_.CopyDeviceMany(copies, n);
  }
  void Fill(float* x, int64_t n, float value) override { Note("Fill", n), cpu_.Fill(x, n, value); }

  void Linear(const float* x, int64_t T, int64_t ldx, const WeightRef& w, int64_t row0,
              int64_t n_rows, float* y, int64_t ldy, bool accumulate) override {
    Note("Linear " + w.name, T, ldx, row0, n_rows, ldy, accumulate);
    cpu_.Linear(x, T, ldx, w, row0, n_rows, y, ldy, accumulate);
  }
  void LinearMany(const float* x, int64_t T, int64_t ldx, const LinearOut* outs,
                  int64_t n) override {
    for (int64_t i = 0; i < n; ++i) {
      Note("LinearMany " + outs[i].w->name, T, ldx, n, outs[i].row0, outs[i].n_rows, outs[i].ldy,
           outs[i].accumulate);
    }
    cpu_.LinearMany(x, T, ldx, outs, n);
  }
  void LinearGrouped(const float* x, int64_t T, int64_t ldx, int64_t x_group_stride,
                     const WeightRef& w, int64_t groups, float* y, int64_t ldy) override {
    Note("LinearGrouped " + w.name, T, ldx, x_group_stride, groups, ldy);
    cpu_.LinearGrouped(x, T, ldx, x_group_stride, w, groups, y, ldy);
  }
  void GatherRows(const WeightRef& w, const int64_t* host_ids, int64_t n, float* out) override {
    Note("GatherRows " + w.name, n), cpu_.GatherRows(w, host_ids, n, out);
  }
  void Add(const float* a, const float* b, int64_t n, float* y) override {
    Note("Add", n), cpu_.Add(a, b, n, y);
  }
  void Scale(float* x, int64_t n, float s) override { Note("Scale", n), cpu_.Scale(x, n, s); }

  void RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight, float eps,
               float* y, int64_t ldy) override {
    Note("RmsNorm", rows, n, ldx, weight != nullptr, ldy);
    cpu_.RmsNorm(x, rows, n, ldx, weight, eps, y, ldy);
  }
  void Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride, int64_t offset,
            int64_t n_pairs, const int32_t* pos, const float* inv_freq, bool inverse) override {
    Note("Rope", rows, ld, heads, head_stride, offset, n_pairs, inverse);
    cpu_.Rope(x, rows, ld, heads, head_stride, offset, n_pairs, pos, inv_freq, inverse);
  }
  void FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, FakeQuantKind kind) override {
    Note("FakeQuant", rows, n, ld, static_cast<int>(kind)), cpu_.FakeQuant(x, rows, n, ld, kind);
  }
  void RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim, int64_t offset,
                     int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                     FakeQuantKind kind) override {
    Note("RopeFakeQuant", rows, heads, head_dim, offset, n_pairs, static_cast<int>(kind));
    cpu_.RopeFakeQuant(x, rows, heads, head_dim, offset, n_pairs, pos, inv_freq, kind);
  }

  void HcMix(const float* x, int64_t T, int64_t hc, int64_t D, const HcSiteWeights& w,
             float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post,
             float* comb) override {
    Note("HcMix", T, hc, D, sinkhorn_iters);
    cpu_.HcMix(x, T, hc, D, w, norm_eps, hc_eps, sinkhorn_iters, pre, post, comb);
  }
  void HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                  float* y) override {
    Note("HcCollapse", T, hc, D), cpu_.HcCollapse(x, pre, T, hc, D, y);
  }
  void HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                      const float* weight, float eps, float* u0, float* y) override {
    Note("HcCollapseNorm", T, hc, D, weight != nullptr);
    cpu_.HcCollapseNorm(x, pre, T, hc, D, weight, eps, u0, y);
  }
  void HcExpand(const float* y, const float* post, const float* comb, int64_t T, int64_t hc,
                int64_t D, float* x) override {
    Note("HcExpand", T, hc, D), cpu_.HcExpand(y, post, comb, T, hc, D, x);
  }

  void SparseAttention(const SparseAttentionArgs& a) override {
    Note("SparseAttention", a.tokens, a.heads, a.head_dim, a.n_window, a.window, a.n_comp,
         a.n_select, a.comp_kv != nullptr, a.selection != nullptr, a.window_start != nullptr,
         a.window_len != nullptr, a.comp_offset != nullptr, a.comp_len != nullptr,
         a.comp_bases != nullptr, a.comp_max_blocks, a.comp_rows_per_block);
    cpu_.SparseAttention(a);
  }
  bool SparseAttentionReadsPagedEntries() const override { return paged_; }
  void GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                 float* out) override {
    Note("GatedPool", groups, ratio, n), cpu_.GatedPool(c, z, groups, ratio, n, out);
  }
  void IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                     const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                     float scale, float* scores) override {
    Note("IndexerScores", T, heads, dim, n_keys, ratio);
    cpu_.IndexerScores(q, w, T, heads, dim, keys, n_keys, q_pos, ratio, scale, scores);
  }
  void IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                           const float* keys, const int32_t* key_offset, const int32_t* key_len,
                           int64_t n_keys, const int32_t* q_pos, int64_t ratio, float scale,
                           float* scores) override {
    Note("IndexerScoresVarlen", T, heads, dim, key_offset != nullptr, key_len != nullptr, n_keys,
         ratio);
    cpu_.IndexerScoresVarlen(q, w, T, heads, dim, keys, key_offset, key_len, n_keys, q_pos, ratio,
                             scale, scores);
  }
  bool IndexerPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) const override {
    return paged_ && cpu_.IndexerPagedApplicable(T, heads, dim, ratio);
  }
  void IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                          const int64_t* key_bases, int64_t max_blocks, int64_t rows_per_block,
                          const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                          int64_t ratio, float scale, float* scores) override {
    Note("IndexerScoresPaged", T, heads, dim, max_blocks, rows_per_block, n_keys, ratio);
    cpu_.IndexerScoresPaged(q, w, T, heads, dim, key_bases, max_blocks, rows_per_block, key_len,
                            n_keys, q_pos, ratio, scale, scores);
  }
  void CandidateMask(const float* scores, int64_t T, int64_t n, const int32_t* q_pos, int64_t ratio,
                     int64_t block, int64_t keep_blocks, uint8_t* mask) override {
    Note("CandidateMask", T, n, ratio, block, keep_blocks);
    cpu_.CandidateMask(scores, T, n, q_pos, ratio, block, keep_blocks, mask);
  }
  void ApplyMask(float* scores, const uint8_t* mask, int64_t T, int64_t n) override {
    Note("ApplyMask", T, n), cpu_.ApplyMask(scores, mask, T, n);
  }
  void TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx) override {
    Note("TopK", T, n, k), cpu_.TopK(scores, T, n, k, idx);
  }
  void GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k, const int64_t* bases,
                          int64_t max_blocks, const int32_t* count, int64_t rows_per_block,
                          int64_t d, float* out, int32_t* remapped) override {
    Note("GatherSelectedRows", T, k, max_blocks, rows_per_block, d);
    cpu_.GatherSelectedRows(selection, T, k, bases, max_blocks, count, rows_per_block, d, out,
                            remapped);
  }
  void ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out) override {
    Note("ArgmaxRows", rows, n, ld), cpu_.ArgmaxRows(x, rows, n, ld, out);
  }

  void RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T, int64_t n_experts,
                         int64_t k, bool renormalise, float scale, int32_t* experts,
                         float* weights) override {
    Note("RouteSqrtSoftplus", T, n_experts, k, renormalise, bias != nullptr);
    cpu_.RouteSqrtSoftplus(logits, bias, T, n_experts, k, renormalise, scale, experts, weights);
  }
  void SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
              const float* row_scale, float* h) override {
    Note("SwiGlu", T, n, row_scale != nullptr), cpu_.SwiGlu(gate, up, T, n, limit, row_scale, h);
  }
  bool CanFuseRoutedExperts(int64_t T, const ExpertWeights& e) const override {
    (void)T, (void)e;
    return true;
  }
  // The fused contract (backend.h RoutedExpertsArgs), one token and slot at a time.
  void RoutedExperts(const RoutedExpertsArgs& a) override {
    Note("RoutedExperts", a.T, a.D, a.k, a.n_experts);
    const int64_t I = a.table[0].w1.rows;
    std::vector<float> gate(I), up(I), h(I), out(a.D);
    std::fill(a.y, a.y + a.T * a.D, 0.0f);  // CPU backend memory is host memory
    for (int64_t t = 0; t < a.T; ++t) {
      for (int64_t i = 0; i < a.k; ++i) {
        const ExpertWeights& e = a.table[a.experts[t * a.k + i]];
        cpu_.Linear(a.x + t * a.D, 1, a.D, e.w1, 0, I, gate.data(), I, false);
        cpu_.Linear(a.x + t * a.D, 1, a.D, e.w3, 0, I, up.data(), I, false);
        cpu_.SwiGlu(gate.data(), up.data(), 1, I, a.swiglu_limit, nullptr, h.data());
        cpu_.Linear(h.data(), 1, I, e.w2, 0, a.D, out.data(), a.D, false);
        const float wt = a.weights[t * a.k + i];
        for (int64_t j = 0; j < a.D; ++j) a.y[t * a.D + j] += wt * out[j];
      }
    }
  }
  void GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                       int64_t width, float* out) override {
    Note("GatherTokenRows", ld, n, width), cpu_.GatherTokenRows(x, ld, host_rows, n, width, out);
  }
  void ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows, float* y,
                      int64_t ld) override {
    Note("ScatterAddRows", n, width, ld), cpu_.ScatterAddRows(v, n, width, host_rows, y, ld);
  }
  void EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                  const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) override {
    Note("EngramGate", T, hc, D), cpu_.EngramGate(x, key, value, q_weight, k_weight, T, hc, D, eps);
  }

 private:
  template <typename... Ints>
  void Note(std::string op, Ints... values) const {
    if (log_ == nullptr) return;
    ((op += ' ', op += std::to_string(static_cast<int64_t>(values))), ...);
    log_->push_back(std::move(op));
  }

  backend::cpu::CpuBackend cpu_;
  const bool paged_;
  std::vector<std::string>* log_ = nullptr;
};

// Where two step logs first differ, for the failure message.
std::string FirstDifference(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return "call " + std::to_string(i) + ": '" + a[i] + "' vs '" + b[i] + "'";
  }
  return "lengths " + std::to_string(a.size()) + " vs " + std::to_string(b.size());
}

// One sequence with a caller-owned block table (as the engine's runner gives one), covering
// every token the test feeds, so that no Forward allocates blocks.
struct PagedSequence {
  SequenceState state;
  std::vector<DeviceFloats> blocks;
  std::vector<int32_t> prompt;
  int32_t next = 0;  // the token the next step feeds
};

struct ShapeCase {
  const char* checkpoint;
  int block_tokens;
  bool paged;
  std::vector<int64_t> prompt_lengths;  // one sequence each
  int steps;
  bool expect_no_bucket_change;  // blocks large enough that no bucket boundary is crossed
};

void PrintTo(const ShapeCase& c, std::ostream* os) {
  *os << c.checkpoint << " blocks " << c.block_tokens << (c.paged ? " paged" : " gathered") << " B "
      << c.prompt_lengths.size();
}

class DecodeShapeTest : public ::testing::TestWithParam<ShapeCase> {};

// The bucket of every size the step's calls depend on: per sequence and group the block slots
// of its entries before and after the step, and the score width of the largest group.
std::vector<int64_t> BucketKey(const std::vector<PagedSequence>& seqs) {
  std::vector<int64_t> key;
  const size_t n_groups = seqs.front().state.groups.size();
  for (size_t gi = 0; gi < n_groups; ++gi) {
    int64_t most_before = 0, most_after = 0;
    for (const PagedSequence& s : seqs) {
      const KvGroupState& g = s.state.groups[gi];
      const int64_t before = g.n_entries();
      const int64_t after = (s.state.length + 1) / std::max(g.ratio, 1);
      key.push_back(PagedBlockSlots(GroupBlocksFor(g, before)));
      key.push_back(PagedBlockSlots(GroupBlocksFor(g, after)));
      most_before = std::max(most_before, before);
      most_after = std::max(most_after, after);
    }
    key.push_back(LaunchBucket(most_before));
    key.push_back(LaunchBucket(most_after));
  }
  return key;
}

TEST_P(DecodeShapeTest, SteadyDecodeStepsRepeatWithPeriodTwo) {
  const ShapeCase& c = GetParam();
  const std::filesystem::path dir = kGoldens / c.checkpoint;
  auto engram = LoadGoldenEngramConstants(dir / "engram_hash.safetensors");
  ASSERT_TRUE(engram.ok()) << engram.status();
  RecordingBackend backend(c.paged);
  auto loaded = Model::Load(dir, &backend, *engram);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  Model& model = **loaded;
  const io::TextConfig& t = model.config().text();
  auto block_floats = model.StateBlockFloats(c.block_tokens);
  ASSERT_TRUE(block_floats.ok()) << block_floats.status();

  std::vector<PagedSequence> seqs(c.prompt_lengths.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    PagedSequence& s = seqs[i];
    const int64_t L = c.prompt_lengths[i];
    // Steady state from the first step: past the window, more entries than index_topk in
    // every group.
    ASSERT_GT(L, t.sliding_window);
    ASSERT_GT(L / 2, t.index_topk);
    auto state = model.NewPagedSequence(c.block_tokens);
    ASSERT_TRUE(state.ok()) << state.status();
    s.state = std::move(*state);
    for (int64_t b = 0; b < BlocksForTokens(s.state.blocks, L + c.steps); ++b) {
      s.blocks.emplace_back(&backend, *block_floats);
      s.state.blocks.table.push_back(s.blocks.back().data());
    }
    for (int64_t j = 0; j < L; ++j) {
      s.prompt.push_back(static_cast<int32_t>((37 * j + 11 * i + 5) % t.vocab_size));
    }
  }
  auto run = [&](bool prompt) {
    ForwardBatch batch;
    for (PagedSequence& s : seqs) {
      std::span<const int32_t> tokens = prompt ? std::span(s.prompt) : std::span(&s.next, 1);
      batch.chunks.push_back({&s.state, tokens, s.state.length, false, ChunkOutput::kGreedyToken});
    }
    auto out = model.Forward(batch);
    ASSERT_TRUE(out.ok()) << out.status();
    for (size_t i = 0; i < seqs.size(); ++i) {
      ASSERT_GE(out->tokens[i], 0);
      seqs[i].next = out->tokens[i];
    }
  };
  run(/*prompt=*/true);
  if (HasFatalFailure()) return;

  std::vector<std::vector<std::string>> logs(c.steps);
  std::vector<std::vector<int64_t>> keys(c.steps);
  for (int s = 0; s < c.steps; ++s) {
    keys[s] = BucketKey(seqs);
    backend.SetLog(&logs[s]);
    run(/*prompt=*/false);
    backend.SetLog(nullptr);
    if (HasFatalFailure()) return;
  }

  // Two consecutive steps (one of them pools) hold the calls that used to vary.
  std::vector<std::string> two_steps = logs[0];
  two_steps.insert(two_steps.end(), logs[1].begin(), logs[1].end());
  auto called = [&](const char* op) {
    return std::any_of(two_steps.begin(), two_steps.end(),
                       [&](const std::string& line) { return line.rfind(op, 0) == 0; });
  };
  for (const char* op :
       {"TopK ", "CandidateMask ", "ApplyMask ", "SparseAttention ", "GatedPool ", "RoutedExperts ",
        c.paged ? "IndexerScoresPaged " : "IndexerScoresVarlen "}) {
    EXPECT_TRUE(called(op)) << op;
  }
  // Paged: the attention reads the selected entries in place, so nothing gathers them.
  EXPECT_EQ(called("GatherSelectedRows "), !c.paged);
  int compared = 0, bucket_changes = 0, odd_differs = 0;
  for (int s = 2; s < c.steps; ++s) {
    if (logs[s] != logs[s - 1]) ++odd_differs;
    if (keys[s] != keys[s - 2]) {
      ++bucket_changes;
      continue;
    }
    ++compared;
    EXPECT_TRUE(logs[s] == logs[s - 2])
        << "step " << s << " vs step " << s - 2 << ": " << FirstDifference(logs[s], logs[s - 2]);
  }
  if (c.expect_no_bucket_change) {
    EXPECT_EQ(bucket_changes, 0);
  } else {
    EXPECT_GT(bucket_changes, 0);  // the case does cross block-slot boundaries
  }
  EXPECT_GE(compared, c.steps / 2);
  RecordProperty("compared_steps", compared);
  RecordProperty("bucket_changes", bucket_changes);
  // The compressor's parity shows: consecutive steps differ, so the log is not blind.
  EXPECT_GT(odd_differs, 0);
}

INSTANTIATE_TEST_SUITE_P(Goldens, DecodeShapeTest,
                         ::testing::Values(ShapeCase{"tiny_a", 16, true, {29}, 32, false},
                                           ShapeCase{"tiny_a", 16, true, {29, 20, 37}, 32, false},
                                           ShapeCase{"tiny_a", 16, false, {29, 20, 37}, 32, false},
                                           ShapeCase{"tiny_a", 256, true, {29, 20, 37}, 24, true},
                                           ShapeCase{"tiny_a", 256, false, {29}, 24, true},
                                           ShapeCase{"tiny_b", 256, true, {140, 130}, 12, true}));

TEST(LaunchBucketTest, Values) {
  EXPECT_EQ(LaunchBucket(0), 0);
  EXPECT_EQ(LaunchBucket(1), 512);
  EXPECT_EQ(LaunchBucket(512), 512);
  EXPECT_EQ(LaunchBucket(513), 1024);
  EXPECT_EQ(LaunchBucket(8191), 8192);
  EXPECT_EQ(LaunchBucket(8192), 8192);
  EXPECT_EQ(LaunchBucket(8193), 9216);
  EXPECT_EQ(LaunchBucket(16384), 16384);
  EXPECT_EQ(LaunchBucket(16385), 18432);
  EXPECT_EQ(LaunchBucket(1 << 20), 1 << 20);
}

TEST(LaunchBucketTest, PaddingIsBoundedAndBucketsFew) {
  std::set<int64_t> buckets;
  for (int64_t n = 1; n <= (int64_t{1} << 20); ++n) {
    const int64_t b = LaunchBucket(n);
    ASSERT_GE(b, n);
    ASSERT_TRUE(b - n < 512 || 8 * (b - n) < n) << n << " -> " << b;
    ASSERT_EQ(LaunchBucket(b), b) << n;
    buckets.insert(b);
  }
  // 16 multiples of 512 up to 8192, then 8 per doubling up to 2^20.
  EXPECT_EQ(buckets.size(), 16u + 7 * 8);
}

TEST(PagedBlockSlotsTest, Values) {
  const std::vector<std::pair<int64_t, int64_t>> cases = {{0, 1}, {1, 1}, {2, 2},      {3, 4},
                                                          {4, 4}, {5, 8}, {1000, 1024}};
  for (const auto& [blocks, slots] : cases) EXPECT_EQ(PagedBlockSlots(blocks), slots) << blocks;
}

// The indexer pads score rows to LaunchBucket(most) columns of -inf: the candidate mask of the
// real columns and the top-k ids must be those of the unpadded rows (including more kept
// blocks than real blocks, and a block straddling the real end).
TEST(PaddedScoresTest, MaskAndTopKUnchanged) {
  backend::cpu::CpuBackend cpu;
  const int64_t T = 3, n = 37, width = LaunchBucket(n), block = 4;
  const std::vector<int32_t> pos = {40, 57, 73};  // ratio 2: 20, 28, 36 visible entries
  std::vector<float> real(T * n), padded(T * width, kNegInf);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t g = 0; g < n; ++g) {
      const bool visible = g < (pos[t] + 1) / 2;
      const float v = std::sin(0.7f * static_cast<float>(g * (t + 3))) * (g % 5 == 0 ? 0.0f : 1.0f);
      real[t * n + g] = padded[t * width + g] = visible ? v : kNegInf;
    }
  }
  for (int64_t keep : {2, 9, 20}) {
    std::vector<uint8_t> mask_real(T * n), mask_padded(T * width);
    cpu.CandidateMask(real.data(), T, n, pos.data(), 2, block, keep, mask_real.data());
    cpu.CandidateMask(padded.data(), T, width, pos.data(), 2, block, keep, mask_padded.data());
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t g = 0; g < n; ++g) {
        ASSERT_EQ(mask_real[t * n + g], mask_padded[t * width + g]) << keep << " " << t << " " << g;
      }
      for (int64_t g = n; g < width; ++g) {
        // Only a block straddling the real end can mark padded columns (still -inf there).
        if (g / block != (n - 1) / block) {
          ASSERT_EQ(mask_padded[t * width + g], 0) << g;
        }
      }
    }
    std::vector<float> masked_real = real, masked_padded = padded;
    cpu.ApplyMask(masked_real.data(), mask_real.data(), T, n);
    cpu.ApplyMask(masked_padded.data(), mask_padded.data(), T, width);
    for (int64_t k : {4, 16, 37}) {
      std::vector<int32_t> ids_real(T * k), ids_padded(T * k);
      cpu.TopK(masked_real.data(), T, n, k, ids_real.data());
      cpu.TopK(masked_padded.data(), T, width, k, ids_padded.data());
      EXPECT_EQ(ids_real, ids_padded) << "keep " << keep << " k " << k;
    }
  }
}

}  // namespace
}  // namespace deepinfer::model

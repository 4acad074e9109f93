// The DeepSeek-V4.1 text backbone (model.md §2): embedding, mHC streams, attention with
// compressed KV + lightning indexer, Engram, MoE, final norm and head.
//
// Forward API (plain data, for the engine): each ForwardChunk feeds a contiguous run of
// tokens of one sequence, starting at the sequence's current length, and updates its
// SequenceState. Results do not depend on how a prompt is split into chunks (up to the
// fake-quant rounding flips described in the goldens README).
#pragma once

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string_view>
#include <utility>
#include <vector>

#include "base/statusor.h"
#include "io/checkpoint.h"
#include "io/model_config.h"
#include "model/backend.h"
#include "model/engram.h"
#include "model/moe.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer::model {

// What a chunk returns (ForwardOutput).
enum class ChunkOutput {
  kLogits,       // logits rows (all_logits: one per token, else the last token's)
  kGreedyToken,  // only the argmax of the last token's logits (Backend::ArgmaxRows): the
                 // step copies one id instead of a vocab-sized row
  kNothing,      // no head at all (a prompt chunk that samples nothing)
};

struct ForwardChunk {
  SequenceState* state = nullptr;
  std::span<const int32_t> tokens;
  // Must equal state->length (positions are start_pos .. start_pos + tokens.size() - 1).
  int64_t start_pos = 0;
  // Logits for every token of the chunk (true) or only its last token (false); only with
  // output == kLogits.
  bool all_logits = false;
  ChunkOutput output = ChunkOutput::kLogits;
};

struct ForwardBatch {
  std::vector<ForwardChunk> chunks;
  // Optional host destination of the logits rows (e.g. Backend::AllocHostFloats memory, which
  // the copy fills ~4x faster on a GPU): when it holds at least the rows x vocab floats of
  // this batch, the rows are written there and ForwardOutput::logits stays empty.
  float* logits_out = nullptr;
  int64_t logits_capacity = 0;  // floats at logits_out
};

struct ForwardOutput {
  // [rows, vocab] fp32 for the kLogits chunks, in chunk order; rows = the sum over those
  // chunks of (all_logits ? tokens : 1). Empty when they went to ForwardBatch::logits_out.
  std::vector<float> logits;
  int64_t rows = 0;
  int64_t vocab = 0;
  // [chunks]: the greedy token of each kGreedyToken chunk, -1 for the other chunks.
  std::vector<int32_t> tokens;
  // Host wall time from the start of Forward until the last device op was issued (just
  // before waiting for the logits): when it is close to the whole step, the host's launches
  // bound the step, not the device.
  double host_issue_seconds = 0.0;
};

// Receives named activations of a forward (for layer-by-layer comparisons), e.g.
// "layers.3.attn_out" [T, D] or "layers.3.streams_out" [T, 4*D]; data in host memory.
using ActivationTrace =
    std::function<void(std::string_view name, const float* data, int64_t rows, int64_t cols)>;

enum class GroupRows;  // model/state_blocks.h

class Model {
 public:
  // Opens `dir` (config.json + checkpoint), binding weights memory-mapped.
  // `engram` must be given when the config has Engram layers.
  static base::StatusOr<std::unique_ptr<Model>> Load(const std::filesystem::path& dir,
                                                     Backend* backend,
                                                     std::optional<EngramHashConstants> engram);
  ~Model();

  const io::ModelConfig& config() const { return config_; }
  // A standalone sequence: allocates its own blocks (DefaultBlockTokens() tokens each) as it
  // grows and frees them with the state.
  SequenceState NewSequence() const;
  // A sequence whose blocks the caller owns: before each Forward, state.blocks.table must
  // hold the base pointers (backend memory, StateBlockFloats(block_tokens) floats each) of the
  // blocks covering every token up to the chunk's end, else Forward fails (InvalidArgument).
  // InvalidArgument if block_tokens is not a positive multiple of every compress ratio.
  base::StatusOr<SequenceState> NewPagedSequence(int block_tokens) const;
  // fp32 values one block of `block_tokens` raw tokens holds (layout: model/state.h).
  base::StatusOr<int64_t> StateBlockFloats(int block_tokens) const;
  // The smallest multiple of every compress ratio that is >= 16.
  int DefaultBlockTokens() const;
  // A standalone sequence with blocks of `block_tokens` tokens (InvalidArgument unless a
  // positive multiple of every compress ratio). Larger blocks mean fewer, larger copies.
  base::StatusOr<SequenceState> NewSequence(int block_tokens) const;
  // For benchmarks: makes a fresh standalone sequence look as if `length` tokens had been
  // consumed. Window rings, compressed entries, index keys and pending compressor rows are
  // filled by cycling through `values` (backend memory, n_values > 0 floats); recent_tokens
  // becomes the Engram history. The logits that follow are meaningless, but each later step
  // does exactly the work of a real sequence of that length.
  base::Status FillSyntheticContext(SequenceState& s, int64_t length, const float* values,
                                    int64_t n_values, std::span<const int32_t> recent_tokens);
  // Runs all chunks together (per-row work batched across chunks, per-sequence attention
  // chunk by chunk) and appends their logits in chunk order. All chunks are validated
  // before any state changes; an error leaves every state untouched. Not reentrant: one
  // Forward at a time per Model (the weights are shared, read-only, by all sequences).
  base::StatusOr<ForwardOutput> Forward(const ForwardBatch& batch);
  // Hands a finished output's logits storage back for the next Forward: a decode step's
  // logits are rows x vocab floats (66 MB at 128 rows), and a fresh vector each step cost
  // ~27 ms of host time at batch 128 in page faults and zero-filling (H200 bench).
  void Recycle(ForwardOutput&& done) { spare_logits_ = std::move(done.logits); }
  void SetTrace(ActivationTrace trace) { trace_ = std::move(trace); }

  // The inverse frequencies in use (fp32, qk_rope_head_dim/2 values).
  const std::vector<float>& main_inv_freq() const { return main_inv_freq_; }
  const std::vector<float>& compress_inv_freq() const { return compress_inv_freq_; }

 private:
  struct ChunkContext;
  struct BatchContext;
  struct PagedAddressing;
  Model() = default;

  base::Status ValidateBatch(const ForwardBatch& batch) const;
  void ForwardAll(const ForwardBatch& batch, ForwardOutput* out);
  void StartBatch(const ForwardBatch& batch, BatchContext& b);
  void Logits(const ForwardBatch& batch, BatchContext& b, const float* h, ForwardOutput* out);
  void EngramLayer(int layer, BatchContext& b);
  void Attention(int layer, BatchContext& b, const float* u, float* out);
  // The attention of every chunk over its window ring + this step's window KV `kv_new`
  // [rows, head_dim] (+ its selected compressed entries), one varlen call; updates the rings.
  void BatchAttention(int layer, BatchContext& b, const float* q, const float* kv_new, float* o);
  // The window-row layout shared by every layer's attention (BatchContext::window_*).
  void LayOutWindows(BatchContext& b);
  // Every chunk's compressed entries of group gi in one buffer (BatchContext::comp_entries),
  // with per-row ranges (comp_ranges).
  void GatherBatchEntries(BatchContext& b, int gi);
  // Whether gathering only the selected entries of group gi moves fewer rows than gathering
  // every chunk's entries (decode at long contexts), and that gather (BatchContext::sel_*).
  bool SelectedGatherPays(const BatchContext& b, int gi) const;
  void GatherSelectedEntries(BatchContext& b, int gi);
  // BatchContext::sel_addressing[gi] for this forward's rows and n_select (one upload per
  // group and forward).
  void EnsureSelectedAddressing(BatchContext& b, int gi);
  // EnsureSelectedAddressing, and whether the attention may read those entries in place (every
  // block base and row 16-byte aligned: SparseAttentionArgs::comp_bases).
  bool SelectedAddressingAligned(BatchContext& b, int gi);
  // BatchContext::key_addressing[gi]: the index keys' blocks of this forward's rows (one
  // upload per group and forward), for Backend::IndexerScoresPaged.
  void EnsureIndexKeyAddressing(BatchContext& b, int gi);
  // Uploads the per-row block addressing of group gi's `which` rows into `out`
  // (BatchContext::PagedAddressing; the ranges part only when k > 0).
  void UploadPagedAddressing(const BatchContext& b, int gi, GroupRows which, int64_t k,
                             PagedAddressing& out);
  // Every chunk's index keys of group gi in one buffer with per-row ranges
  // (BatchContext::index_keys / index_key_ranges), once per forward.
  void GatherBatchIndexKeys(BatchContext& b, int gi);
  // Compressor of KV source `layer` (group gi) over every chunk's new tokens.
  void Compress(int layer, BatchContext& b, const float* u, int gi);
  // The lightning indexer of index-source `layer`: IndexerQuery computes the rows' index
  // queries and head weights (from q_r and u only, so it may run beside the compressor);
  // IndexerSelect scores them against group gi's keys and writes b.selection.
  struct IndexerQueries {
    DeviceFloats qi;  // [R, index heads * index head dim], RoPE'd and FP4-fake-quantised
    DeviceFloats hw;  // [R, index heads], scaled head weights
  };
  IndexerQueries IndexerQuery(int layer, BatchContext& b, const float* u, const float* q_r);
  void IndexerSelect(int layer, BatchContext& b, const IndexerQueries& q, int gi);
  SequenceState NewSequenceWithBlocks(int block_tokens, bool self_allocating) const;
  void Emit(const std::string& name, const float* data, int64_t rows, int64_t cols);

  io::ModelConfig config_;
  Backend* backend_ = nullptr;
  std::unique_ptr<io::Checkpoint> checkpoint_;
  std::unique_ptr<ModelWeights> weights_;
  std::optional<EngramHashConstants> engram_hash_;
  std::unique_ptr<EngramTable> engram_table_;
  std::unique_ptr<ExpertDispatcher> dispatcher_;
  std::unique_ptr<MoeLayer> moe_;
  std::vector<float> main_inv_freq_, compress_inv_freq_;
  ActivationTrace trace_;
  std::chrono::steady_clock::time_point forward_start_;  // of the Forward in progress
  // DEEPINFER_HOST_PROFILE=1: each Forward logs the host time at its phase ends (a
  // diagnostic of where the host spends a step; off by default).
  void HostPhase(const char* label);
  bool host_profile_ = std::getenv("DEEPINFER_HOST_PROFILE") != nullptr;
  std::vector<std::pair<const char*, double>> host_phases_;
  std::vector<float> spare_logits_;  // Recycle: storage (capacity and size) for the next output
};

// RoPE inverse frequencies (model.md §2.3): theta^(-2i/r) in fp32, optionally with YaRN.
std::vector<float> RopeInvFreq(int64_t rope_dim, double theta, const io::RopeScaling* yarn);

}  // namespace deepinfer::model

// Model: standalone sequences with chosen block sizes, and synthetic contexts for benchmarks.
#include <algorithm>
#include <string>
#include <vector>

#include "model/model.h"
#include "model/state_blocks.h"

namespace deepinfer::model {
namespace {

// The copies that fill n floats at dst by cycling through values[0, n_values), starting at
// *cursor.
void FillCycling(float* dst, int64_t n, const float* values, int64_t n_values, int64_t* cursor,
                 std::vector<DeviceCopy>* copies) {
  int64_t done = 0;
  while (done < n) {
    const int64_t start = *cursor % n_values;
    const int64_t run = std::min(n - done, n_values - start);
    copies->push_back({dst + done, values + start, run * static_cast<int64_t>(sizeof(float))});
    done += run;
    *cursor = start + run;
  }
}

}  // namespace

base::StatusOr<SequenceState> Model::NewSequence(int block_tokens) const {
  DI_RETURN_IF_ERROR(StateBlockFloats(block_tokens).status());
  return NewSequenceWithBlocks(block_tokens, /*self_allocating=*/true);
}

base::Status Model::FillSyntheticContext(SequenceState& s, int64_t length, const float* values,
                                         int64_t n_values, std::span<const int32_t> recent_tokens) {
  const io::TextConfig& t = config_.text();
  if (s.length != 0 || !s.blocks.self_allocating) {
    return base::InvalidArgumentError("synthetic context needs a fresh standalone sequence");
  }
  if (length < 0 || length >= t.max_position_embeddings || n_values <= 0) {
    return base::InvalidArgumentError("synthetic context length " + std::to_string(length) +
                                      " or value count out of range");
  }
  DI_RETURN_IF_ERROR(EnsureBlocks(backend_, s.blocks, length));
  int64_t cursor = 0;
  std::vector<DeviceCopy> copies;
  const int64_t W = t.sliding_window, d = t.head_dim;
  for (WindowRing& ring : s.windows) {
    FillCycling(ring.kv.data(), W * d, values, n_values, &cursor, &copies);
    std::fill(ring.pos.begin(), ring.pos.end(), -1);
    for (int64_t p = std::max<int64_t>(0, length - W); p < length; ++p) {
      ring.pos[p % W] = static_cast<int32_t>(p);
    }
  }
  for (float* block : s.blocks.table) {
    FillCycling(block, s.blocks.block_floats, values, n_values, &cursor, &copies);
  }
  for (KvGroupState& g : s.groups) {
    const int64_t r = std::max(g.ratio, 1);
    g.entry_count = length / r;
    g.n_pending = g.ratio > 1 ? length % r : 0;
    if (g.n_pending > 0) {
      FillCycling(g.pending_c.data(), g.n_pending * d, values, n_values, &cursor, &copies);
      FillCycling(g.pending_z.data(), g.n_pending * d, values, n_values, &cursor, &copies);
    }
  }
  backend_->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
  const size_t keep = static_cast<size_t>(std::max(t.engram_max_ngram_size - 1, 0));
  s.recent_tokens.assign(recent_tokens.begin(), recent_tokens.end());
  if (s.recent_tokens.size() > keep) {
    s.recent_tokens.erase(s.recent_tokens.begin(), s.recent_tokens.end() - keep);
  }
  s.length = length;
  return backend_->Synchronize();
}

}  // namespace deepinfer::model

// Byte-level BPE model: a vocabulary of byte strings and ranked merges of (left id, right id).
//
// EncodeWord applies merges exactly like HF `tokenizers` BPE::merge_word (no dropout): start
// from one symbol per byte, repeatedly merge the adjacent pair with the lowest merge rank
// (leftmost on ties) until no adjacent pair has a merge.
//
// Thread-safety: immutable after construction; EncodeWord may run concurrently. A per-thread
// cache of recent words speeds up repeated words.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/statusor.h"

namespace deepinfer::tokenizer {

class BpeModel {
 public:
  struct Merge {
    int32_t left;
    int32_t right;
  };
  // `token_bytes[id]` = raw bytes of vocab token `id` (may be empty for unused ids).
  // `merges` in rank order (rank = index). Errors: a merge whose concatenation is not in the
  // vocabulary, an id out of range.
  static base::StatusOr<BpeModel> Create(std::vector<std::string> token_bytes,
                                         const std::vector<Merge>& merges);

  // Appends the ids of one pre-tokenized word (raw bytes, non-empty) to `ids`.
  void EncodeWord(std::string_view word, std::vector<int32_t>* ids) const;

 private:
  struct MergeSlot {
    uint64_t key;  // (left << 32) | right; kEmptyKey = free
    int32_t rank;
    int32_t merged_id;
  };
  static constexpr uint64_t kEmptyKey = ~0ULL;

  BpeModel() = default;
  // Rank/result of merging (left, right); rank < 0 if there is no such merge.
  const MergeSlot* FindMerge(int32_t left, int32_t right) const;
  void UpsertMerge(int32_t left, int32_t right, int32_t rank, int32_t merged_id);
  void MergeShortWord(std::string_view word, std::vector<int32_t>* ids) const;
  void MergeLongWord(std::string_view word, std::vector<int32_t>* ids) const;

  uint64_t instance_id_ = 0;            // distinguishes models in the per-thread cache
  int32_t byte_token_[256];             // id of each single-byte token, -1 if absent
  std::vector<MergeSlot> merge_table_;  // open addressing, size a power of two
  uint64_t merge_mask_ = 0;
};

}  // namespace deepinfer::tokenizer

#include "tokenizer/bpe.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <queue>
#include <string>
#include <unordered_map>

#include "base/check.h"
#include "base/status.h"

namespace deepinfer::tokenizer {
namespace {

constexpr size_t kShortWordLimit = 48;  // bytes; longer words use the heap algorithm

uint64_t HashKey(uint64_t key) {
  key ^= key >> 33;
  key *= 0xff51afd7ed558ccdULL;
  key ^= key >> 33;
  return key;
}

// Per-thread direct-mapped word cache: short words (<= kCachedBytes) whose BPE result has at
// most kCachedIds ids. Entries belong to one model (instance id); another model on the same
// thread starts from an empty cache. A slot is overwritten on collision.
constexpr size_t kCachedBytes = 23;
constexpr size_t kCachedIds = 8;
constexpr size_t kCacheSlots = 1 << 14;

struct CacheSlot {
  uint64_t hash = 0;
  uint8_t length = 0;  // 0 = empty
  uint8_t num_ids = 0;
  char bytes[kCachedBytes];
  int32_t ids[kCachedIds];
};

struct WordCache {
  uint64_t owner = 0;
  std::vector<CacheSlot> slots;
};

WordCache& ThreadWordCache(uint64_t owner) {
  thread_local WordCache cache;
  if (cache.owner != owner) {
    cache.slots.assign(kCacheSlots, CacheSlot{});
    cache.owner = owner;
  }
  return cache;
}

// FNV-1a over the word, then a finalizer (words are short; this is cheaper than a call).
uint64_t HashWord(std::string_view word) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (char c : word) h = (h ^ static_cast<uint8_t>(c)) * 0x100000001b3ULL;
  return HashKey(h);
}

std::atomic<uint64_t> next_instance_id{1};

}  // namespace

base::StatusOr<BpeModel> BpeModel::Create(std::vector<std::string> token_bytes,
                                          const std::vector<Merge>& merges) {
  BpeModel model;
  model.instance_id_ = next_instance_id.fetch_add(1);
  std::fill(std::begin(model.byte_token_), std::end(model.byte_token_), -1);
  std::unordered_map<std::string_view, int32_t> id_of;
  id_of.reserve(token_bytes.size() * 2);
  for (size_t id = 0; id < token_bytes.size(); ++id) {
    const std::string& bytes = token_bytes[id];
    if (bytes.empty()) continue;
    id_of.emplace(bytes, static_cast<int32_t>(id));
    if (bytes.size() == 1)
      model.byte_token_[static_cast<uint8_t>(bytes[0])] = static_cast<int32_t>(id);
  }
  size_t capacity = 16;
  while (capacity < merges.size() * 2) capacity <<= 1;
  model.merge_table_.assign(capacity, MergeSlot{kEmptyKey, -1, -1});
  model.merge_mask_ = capacity - 1;
  const auto num_tokens = static_cast<int32_t>(token_bytes.size());
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Merge& m = merges[rank];
    if (m.left < 0 || m.left >= num_tokens || m.right < 0 || m.right >= num_tokens) {
      return base::InvalidArgumentError("BPE merge #" + std::to_string(rank) +
                                        " refers to an id outside the vocabulary");
    }
    const std::string merged = token_bytes[m.left] + token_bytes[m.right];
    auto it = id_of.find(merged);
    if (it == id_of.end()) {
      return base::InvalidArgumentError("BPE merge #" + std::to_string(rank) +
                                        ": the merged token is not in the vocabulary");
    }
    // HF collects the merges into a map in order, so a duplicated pair keeps its last rank.
    model.UpsertMerge(m.left, m.right, static_cast<int32_t>(rank), it->second);
  }
  return model;
}

const BpeModel::MergeSlot* BpeModel::FindMerge(int32_t left, int32_t right) const {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  for (uint64_t slot = HashKey(key) & merge_mask_;; slot = (slot + 1) & merge_mask_) {
    const MergeSlot& s = merge_table_[slot];
    if (s.key == key) return &s;
    if (s.key == kEmptyKey) return nullptr;
  }
}

void BpeModel::UpsertMerge(int32_t left, int32_t right, int32_t rank, int32_t merged_id) {
  const uint64_t key =
      (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  uint64_t slot = HashKey(key) & merge_mask_;
  while (merge_table_[slot].key != kEmptyKey && merge_table_[slot].key != key) {
    slot = (slot + 1) & merge_mask_;
  }
  merge_table_[slot] = MergeSlot{key, rank, merged_id};
}

void BpeModel::EncodeWord(std::string_view word, std::vector<int32_t>* ids) const {
  if (word.size() == 1) {
    const int32_t id = byte_token_[static_cast<uint8_t>(word[0])];
    if (id >= 0) ids->push_back(id);
    return;
  }
  if (word.size() > kShortWordLimit) {
    MergeLongWord(word, ids);
    return;
  }
  if (word.size() > kCachedBytes) {
    MergeShortWord(word, ids);
    return;
  }
  WordCache& cache = ThreadWordCache(instance_id_);
  const uint64_t hash = HashWord(word);
  CacheSlot& slot = cache.slots[hash & (kCacheSlots - 1)];
  if (slot.hash == hash && slot.length == word.size() &&
      std::memcmp(slot.bytes, word.data(), word.size()) == 0) {
    ids->insert(ids->end(), slot.ids, slot.ids + slot.num_ids);
    return;
  }
  const size_t first = ids->size();
  MergeShortWord(word, ids);
  const size_t produced = ids->size() - first;
  if (produced <= kCachedIds) {
    slot.hash = hash;
    slot.length = static_cast<uint8_t>(word.size());
    slot.num_ids = static_cast<uint8_t>(produced);
    std::memcpy(slot.bytes, word.data(), word.size());
    std::copy(ids->begin() + static_cast<ptrdiff_t>(first), ids->end(), slot.ids);
  }
}

// O(n^2) in symbols, no allocation: fine for the typical word of a few bytes.
void BpeModel::MergeShortWord(std::string_view word, std::vector<int32_t>* ids) const {
  int32_t symbols[kShortWordLimit];
  int32_t ranks[kShortWordLimit];   // ranks[i]: rank of merging symbols[i], symbols[i+1]
  int32_t merged[kShortWordLimit];  // result id of that merge
  size_t n = 0;
  for (char c : word) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id >= 0) symbols[n++] = id;  // HF drops bytes without a token (no unk token)
  }
  auto update_pair = [&](size_t i) {
    const MergeSlot* m = FindMerge(symbols[i], symbols[i + 1]);
    ranks[i] = m ? m->rank : INT32_MAX;
    merged[i] = m ? m->merged_id : -1;
  };
  for (size_t i = 0; i + 1 < n; ++i) update_pair(i);
  while (n > 1) {
    size_t best = 0;
    for (size_t i = 1; i + 1 < n; ++i) {
      if (ranks[i] < ranks[best]) best = i;
    }
    if (ranks[best] == INT32_MAX) break;
    symbols[best] = merged[best];
    for (size_t i = best + 1; i + 1 < n; ++i) {
      symbols[i] = symbols[i + 1];
      ranks[i] = ranks[i + 1];
      merged[i] = merged[i + 1];
    }
    --n;
    if (best > 0) update_pair(best - 1);
    if (best + 1 < n) update_pair(best);
  }
  ids->insert(ids->end(), symbols, symbols + n);
}

// Linked symbols + a min-heap of (rank, position) candidates, like HF's merge_word. A stale
// candidate is recognised because its pair no longer produces the same merged id.
void BpeModel::MergeLongWord(std::string_view word, std::vector<int32_t>* ids) const {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t merged_id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char c : word) {
    const int32_t id = byte_token_[static_cast<uint8_t>(c)];
    if (id < 0) continue;
    const auto pos = static_cast<int32_t>(symbols.size());
    symbols.push_back(Symbol{id, pos - 1, pos + 1, true});
  }
  if (symbols.empty()) return;
  symbols.back().next = -1;
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    const MergeSlot* m = FindMerge(symbols[pos].id, symbols[next].id);
    if (m) heap.push(Candidate{m->rank, pos, m->merged_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!heap.empty()) {
    const Candidate top = heap.top();
    heap.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    const MergeSlot* m = FindMerge(left.id, right.id);
    if (m == nullptr || m->merged_id != top.merged_id) continue;  // stale
    left.id = top.merged_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  for (int32_t pos = 0; pos >= 0; pos = symbols[pos].next) ids->push_back(symbols[pos].id);
}

}  // namespace deepinfer::tokenizer

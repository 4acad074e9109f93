#include "model/state_blocks.h"

#include <algorithm>
#include <string>

#include "base/check.h"

namespace deepinfer::model {
namespace {

// Visits the contiguous runs of rows [first_row, first_row + n) of a group: fn(block row
// pointer, offset of the run in rows, run length in rows).
template <typename Fn>
void ForEachRun(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                int64_t width, int64_t first_row, int64_t n, Fn fn) {
  const int64_t per_block = group.entries_per_block;
  for (int64_t done = 0; done < n;) {
    const int64_t row = first_row + done;
    const int64_t block = row / per_block, in_block = row % per_block;
    const int64_t run = std::min(n - done, per_block - in_block);
    fn(GroupBlockRows(blocks, group, which, block) + in_block * width, done, run);
    done += run;
  }
}

}  // namespace

float* GroupBlockRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                      int64_t block) {
  CHECK(which == GroupRows::kEntries || group.has_keys) << "group has no index keys";
  CHECK(block >= 0 && block < static_cast<int64_t>(blocks.table.size()))
      << "block " << block << " unpaged";
  const int64_t offset = which == GroupRows::kEntries ? group.entry_offset : group.key_offset;
  return blocks.table[block] + offset;
}

int64_t GroupBlocksFor(const KvGroupState& group, int64_t n) {
  return (n + group.entries_per_block - 1) / group.entries_per_block;
}

void AppendWriteGroupRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                          int64_t width, int64_t first_row, const float* src, int64_t n,
                          std::vector<DeviceCopy>* copies) {
  ForEachRun(blocks, group, which, width, first_row, n,
             [&](float* rows, int64_t done, int64_t run) {
               copies->push_back(
                   {rows, src + done * width, static_cast<int64_t>(run * width * sizeof(float))});
             });
}

void AppendGatherGroupRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                           int64_t width, int64_t n, float* dst, std::vector<DeviceCopy>* copies) {
  ForEachRun(blocks, group, which, width, 0, n, [&](float* rows, int64_t done, int64_t run) {
    copies->push_back(
        {dst + done * width, rows, static_cast<int64_t>(run * width * sizeof(float))});
  });
}

void WriteGroupRows(Backend* backend, const StateBlocks& blocks, const KvGroupState& group,
                    GroupRows which, int64_t width, int64_t first_row, const float* src,
                    int64_t n) {
  std::vector<DeviceCopy> copies;
  AppendWriteGroupRows(blocks, group, which, width, first_row, src, n, &copies);
  backend->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
}

void GatherGroupRows(Backend* backend, const StateBlocks& blocks, const KvGroupState& group,
                     GroupRows which, int64_t width, int64_t n, float* dst) {
  std::vector<DeviceCopy> copies;
  AppendGatherGroupRows(blocks, group, which, width, n, dst, &copies);
  backend->CopyDeviceMany(copies.data(), static_cast<int64_t>(copies.size()));
}

int64_t BlocksForTokens(const StateBlocks& blocks, int64_t n_tokens) {
  return (n_tokens + blocks.block_tokens - 1) / blocks.block_tokens;
}

base::Status EnsureBlocks(Backend* backend, StateBlocks& blocks, int64_t n_tokens) {
  const int64_t needed = BlocksForTokens(blocks, n_tokens);
  if (static_cast<int64_t>(blocks.table.size()) >= needed) return base::Status::Ok();
  if (!blocks.self_allocating) {
    return base::InvalidArgumentError(
        "sequence state: block table has " + std::to_string(blocks.table.size()) + " blocks of " +
        std::to_string(blocks.block_tokens) + " tokens, the chunk needs " + std::to_string(needed) +
        " (" + std::to_string(n_tokens) + " tokens)");
  }
  while (static_cast<int64_t>(blocks.table.size()) < needed) {
    blocks.owned.emplace_back(backend, blocks.block_floats);
    blocks.table.push_back(blocks.owned.back().data());
  }
  return base::Status::Ok();
}

}  // namespace deepinfer::model

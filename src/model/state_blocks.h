// Row access to the paged compressed state of a SequenceState (model/state.h StateBlocks).
//
// Rows of one group are addressed by entry index e: block e / entries_per_block, row
// e % entries_per_block, at the group's entry (or index-key) offset. Reads gather a group's
// rows into a contiguous scratch (one Backend::CopyDeviceMany per call); a paged
// attention kernel reading blocks directly would remove that copy.
#pragma once

#include <cstdint>
#include <vector>

#include "base/status.h"
#include "model/backend.h"
#include "model/state.h"

namespace deepinfer::model {

enum class GroupRows { kEntries, kIndexKeys };

// The copies WriteGroupRows / GatherGroupRows would make, appended to `copies` (so that the
// copies of many groups or sequences can run as one Backend::CopyDeviceMany).
void AppendWriteGroupRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                          int64_t width, int64_t first_row, const float* src, int64_t n,
                          std::vector<DeviceCopy>* copies);
void AppendGatherGroupRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                           int64_t width, int64_t n, float* dst, std::vector<DeviceCopy>* copies);

// Where block `block`'s rows of a group start (row e of the group is at
// GroupBlockRows(.., e / entries_per_block) + (e % entries_per_block) * width). CHECKs that the
// table has the block.
float* GroupBlockRows(const StateBlocks& blocks, const KvGroupState& group, GroupRows which,
                      int64_t block);
// Blocks holding the group's first n rows.
int64_t GroupBlocksFor(const KvGroupState& group, int64_t n);

// Copies n rows [n, width] from backend memory `src` to rows first_row.. of the group.
// CHECKs that the blocks cover them.
void WriteGroupRows(Backend* backend, const StateBlocks& blocks, const KvGroupState& group,
                    GroupRows which, int64_t width, int64_t first_row, const float* src, int64_t n);

// Copies rows [0, n) of the group to `dst` [n, width] (backend memory).
void GatherGroupRows(Backend* backend, const StateBlocks& blocks, const KvGroupState& group,
                     GroupRows which, int64_t width, int64_t n, float* dst);

// Blocks needed to hold the compressed state of the first n_tokens tokens.
int64_t BlocksForTokens(const StateBlocks& blocks, int64_t n_tokens);

// Makes `blocks` cover n_tokens tokens: a self-allocating state allocates the missing blocks;
// otherwise InvalidArgument (naming both counts) if the caller's table is too short.
base::Status EnsureBlocks(Backend* backend, StateBlocks& blocks, int64_t n_tokens);

}  // namespace deepinfer::model

// Device grouping of routed (token, slot) pairs by expert, shared by the expert-major FP8
// (k_moe_fp8.cu) and bf16 (k_moe_bf16.cu) routed-expert kernels. Include from .cu files only.
//
//  CountPairsKernel: block e counts the pairs routed to expert e (__syncthreads_count).
//  FillGroupsKernel: block e places its pairs at order[start_e ..] in pair order (stable,
//    ballot prefix counts: no atomics decide a position) and writes its work items
//    (expert, first position, count <= bn), ceil(count / bn) of them at item_base_e.
//  TakeGroupScratch / GroupsAt / LaunchGrouping: their scratch and the two launches.
// Grid sizes depend only on the shapes (no host synchronisation).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/cuda_reduce.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace deepinfer::backend::cuda::kernels::moe_groups {
// Internal linkage: every .cu file that includes this gets its own copy of the kernels.
namespace {

inline constexpr int kGroupThreads = 256;

// Item: (expert, first position in order, pairs).
struct Item {
  int32_t expert, start, count, pad;
};

// Work items at most: P pairs in items of <= bn pairs, plus one partial item per expert.
inline int64_t MaxItems(int64_t P, int64_t n_experts, int bn) {
  return (P + bn - 1) / bn + std::min(P, n_experts);
}

__global__ void __launch_bounds__(kGroupThreads)
    CountPairsKernel(const int32_t* experts, int64_t P, int32_t n_experts, int32_t* counts,
                     int* error_word) {
  pdl::WaitThenAllowNext();
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  if (e == 0 && error_word != nullptr) {  // ids out of range join no group (NaN rows)
    for (int64_t p = threadIdx.x; p < P; p += kGroupThreads) {
      if (experts[p] < 0 || experts[p] >= n_experts) atomicOr(error_word, kErrExpertOutOfRange);
    }
  }
  int count = 0;
  for (int64_t base = 0; base < P; base += kGroupThreads) {
    const int64_t p = base + threadIdx.x;
    count += __syncthreads_count(p < P && experts[p] == e);
  }
  if (threadIdx.x == 0) counts[e] = count;
}

__global__ void __launch_bounds__(kGroupThreads)
    FillGroupsKernel(const int32_t* experts, int64_t P, const int32_t* counts, int bn,
                     int32_t* order, Item* items, int32_t* n_items) {
  pdl::WaitThenAllowNext();
  __shared__ int scratch[33];
  __shared__ int sums[2];
  const int32_t e = static_cast<int32_t>(blockIdx.x);
  if (threadIdx.x < 2) sums[threadIdx.x] = 0;
  __syncthreads();
  int start = 0, item_base = 0;
  for (int32_t i = threadIdx.x; i < e; i += kGroupThreads) {
    start += counts[i];
    item_base += (counts[i] + bn - 1) / bn;
  }
  atomicAdd(&sums[0], start);  // integer sums: the order does not matter
  atomicAdd(&sums[1], item_base);
  __syncthreads();
  start = sums[0];
  item_base = sums[1];
  const int count = counts[e];
  int placed = 0;
  for (int64_t base = 0; base < P; base += kGroupThreads) {
    const int64_t p = base + threadIdx.x;
    const bool mine = p < P && experts[p] == e;
    int chunk_total = 0;
    const int rank = BlockExclusiveCount(mine, &chunk_total, scratch);
    if (mine) order[start + placed + rank] = static_cast<int32_t>(p);
    placed += chunk_total;
  }
  const int my_items = (count + bn - 1) / bn;
  for (int i = threadIdx.x; i < my_items; i += kGroupThreads) {
    items[item_base + i] = Item{e, start + i * bn, min(bn, count - i * bn), 0};
  }
  if (e == static_cast<int32_t>(gridDim.x) - 1 && threadIdx.x == 0) {
    *n_items = item_base + my_items;
  }
}

// Byte offsets of the grouping's scratch parts: order [P] int32, counts [n_experts] int32,
// items [MaxItems], n_items [1] int32.
struct GroupScratch {
  int64_t order = 0, counts = 0, items = 0, n_items = 0;
};

GroupScratch TakeGroupScratch(ScratchCarver& carver, int64_t P, int64_t n_experts, int bn) {
  GroupScratch g;
  g.order = carver.Take(P * 4);
  g.counts = carver.Take(n_experts * 4);
  g.items = carver.Take(MaxItems(P, n_experts, bn) * static_cast<int64_t>(sizeof(Item)));
  g.n_items = carver.Take(4);
  return g;
}

// The grouping's device arrays inside a scratch allocation starting at `base`.
struct Groups {
  int32_t* order;
  int32_t* counts;
  Item* items;
  int32_t* n_items;
};

Groups GroupsAt(char* base, const GroupScratch& g) {
  return {reinterpret_cast<int32_t*>(base + g.order), reinterpret_cast<int32_t*>(base + g.counts),
          reinterpret_cast<Item*>(base + g.items), reinterpret_cast<int32_t*>(base + g.n_items)};
}

// Groups the P = T * k pairs of `experts` (device [P]) into items of <= bn pairs: CountPairs
// then FillGroups, one block per expert. Ids outside [0, n_experts) set kErrExpertOutOfRange.
cudaError_t LaunchGrouping(const int32_t* experts, int64_t P, int64_t n_experts, int bn,
                           const Groups& g, int* error_word, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>(n_experts);
  pdl::Launch(CountPairsKernel, blocks, kGroupThreads, 0, stream, experts, P,
              static_cast<int32_t>(n_experts), g.counts, error_word);
  pdl::Launch(FillGroupsKernel, blocks, kGroupThreads, 0, stream, experts, P, g.counts, bn, g.order,
              g.items, g.n_items);
  return cudaGetLastError();
}

}  // namespace
}  // namespace deepinfer::backend::cuda::kernels::moe_groups

// SparseAttention with the selected compressed entries read in place through per-token block
// tables (model::SparseAttentionArgs::comp_bases) against the same rows in one flat buffer:
// every CUDA attention kernel must give bitwise the same output and error word (the rows and
// their order are the same; only the address computation differs). Also the CPU reference on
// both forms, and an id whose block lies past the table flagged like an id past comp_len.
//
// Filter: --gtest_filter='CudaAttentionPagedTest.*'.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_attention_test_util.h"
#include "backend/cuda/cuda_test_util.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_attn_mma.h"
#include "backend/cuda/kernels_attn_prefill.h"

namespace deepinfer::backend::cuda::testing {
namespace {

using Kernel = std::function<cudaError_t(const model::SparseAttentionArgs&, int*)>;

struct Result {
  std::vector<float> out;
  int32_t error_word = 0;
};

// Each token's compressed rows (comp_offset[t] .., comp_len[t] of them) copied into blocks of
// `rows_per_block` rows at shuffled slots of a NaN-filled arena (rows past a token's count stay
// NaN: a wrong read shows). slot[t * max_blocks + b] is the arena slot of token t's block b.
struct PagedLayout {
  std::vector<float> arena;
  std::vector<int64_t> slot;
  int64_t rows_per_block = 0, max_blocks = 1;

  // The block table (SparseAttentionArgs::comp_bases) with the arena at `base`.
  std::vector<int64_t> Bases(const float* base, int64_t d) const {
    std::vector<int64_t> bases(slot.size(), 0);
    for (size_t i = 0; i < slot.size(); ++i) {
      if (slot[i] >= 0) bases[i] = reinterpret_cast<int64_t>(base + slot[i] * rows_per_block * d);
    }
    return bases;
  }
  // `flat` (the same rows in comp_kv) reading them through `bases` instead.
  model::SparseAttentionArgs Args(model::SparseAttentionArgs flat, const int64_t* bases) const {
    flat.comp_kv = nullptr, flat.n_comp = 0, flat.comp_offset = nullptr;
    flat.comp_bases = bases, flat.comp_max_blocks = max_blocks;
    flat.comp_rows_per_block = rows_per_block;
    return flat;
  }
};

PagedLayout Layout(const AttnInputs& in, int64_t rows_per_block, std::mt19937_64& rng) {
  PagedLayout l;
  l.rows_per_block = rows_per_block;
  const int64_t d = in.d;
  auto blocks_of = [&](int64_t t) {
    return (in.comp_len[t] + rows_per_block - 1) / rows_per_block;
  };
  int64_t n_blocks = 0;
  for (int64_t t = 0; t < in.tokens; ++t) {
    l.max_blocks = std::max(l.max_blocks, blocks_of(t));
    n_blocks += blocks_of(t);
  }
  std::vector<int64_t> order(n_blocks);  // the tokens' blocks in order -> arena slot
  std::iota(order.begin(), order.end(), 0);
  std::shuffle(order.begin(), order.end(), rng);
  l.arena.assign(std::max<int64_t>(n_blocks, 1) * rows_per_block * d,
                 std::numeric_limits<float>::quiet_NaN());
  l.slot.assign(in.tokens * l.max_blocks, -1);
  for (int64_t t = 0, i = 0; t < in.tokens; ++t) {
    for (int64_t b = 0; b < blocks_of(t); ++b, ++i) l.slot[t * l.max_blocks + b] = order[i];
    for (int64_t r = 0; r < in.comp_len[t]; ++r) {
      const int64_t s = l.slot[t * l.max_blocks + r / rows_per_block];
      std::copy_n(in.comp_kv.begin() + (in.comp_offset[t] + r) * d, d,
                  l.arena.begin() + (s * rows_per_block + r % rows_per_block) * d);
    }
  }
  return l;
}

class CudaAttentionPagedTest : public CudaAttentionTestBase {
 protected:
  // The inputs' device args `flat` read through a PagedLayout of `rows_per_block` rows a block
  // (a fresh poisoned out). host_bases (if given) receives the table.
  model::SparseAttentionArgs Paged(const AttnInputs& in, const model::SparseAttentionArgs& flat,
                                   int64_t rows_per_block,
                                   std::vector<int64_t>* host_bases = nullptr) {
    const PagedLayout l = Layout(in, rows_per_block, rng_);
    const std::vector<int64_t> bases = l.Bases(ToGpu(l.arena), in.d);
    if (host_bases != nullptr) *host_bases = bases;
    model::SparseAttentionArgs p = l.Args(flat, Table(bases));
    p.out = PoisonedFloats(std::max<int64_t>(in.out_size(), 1));
    return p;
  }
  const int64_t* Table(const std::vector<int64_t>& bases) {
    std::vector<uint8_t> bytes(bases.size() * sizeof(int64_t));
    std::memcpy(bytes.data(), bases.data(), bytes.size());
    return reinterpret_cast<const int64_t*>(BytesToGpu(bytes));
  }
  Result Run(const Kernel& kernel, const model::SparseAttentionArgs& a, int64_t out_size) {
    int32_t* err = ToGpu(std::vector<int32_t>{0});
    EXPECT_EQ(kernel(a, reinterpret_cast<int*>(err)), cudaSuccess);
    return {FromGpu(a.out, out_size), FromGpu(err, 1)[0]};
  }
  // The case on `kernel`, flat and paged (3 and 4 rows per block): the same bits.
  void ExpectPagedEqualsFlat(const AttnCase& c, const Kernel& kernel);
};

void CudaAttentionPagedTest::ExpectPagedEqualsFlat(const AttnCase& c, const Kernel& kernel) {
  SCOPED_TRACE(c.name);
  const AttnInputs in = MakeInputs(c);
  const model::SparseAttentionArgs flat = GpuArgs(in);
  const Result want = Run(kernel, flat, in.out_size());
  EXPECT_EQ(want.error_word, 0);
  for (int64_t rows_per_block : {3, 4}) {
    const Result got = Run(kernel, Paged(in, flat, rows_per_block), in.out_size());
    EXPECT_EQ(got.error_word, want.error_word) << rows_per_block;
    EXPECT_TRUE(BitExact(got.out, want.out)) << rows_per_block << " rows per block";
  }
}

// Three sequences, some empty selection slots, rows past the blocks' ends.
AttnCase Sequences(int64_t heads, int64_t d, const std::string& name) {
  AttnCase c;
  c.heads = heads, c.d = d, c.window = 16, c.n_select = 12, c.q_bf16 = true;
  c.seqs = {{3, 20, 41}, {2, 10, 13}, {1, 0, 7}};
  c.name = name;
  return c;
}

TEST_F(CudaAttentionPagedTest, EveryKernelReadsTheSameRows) {
  cudaStream_t stream = gpu_->stream();
  ExpectPagedEqualsFlat(Sequences(16, 64, "fp32 kernel"), [&](const auto& a, int* err) {
    return kernels::SparseAttention(a, err, stream);
  });
  for (bool rounded : {false, true}) {
    ExpectPagedEqualsFlat(Sequences(16, 64, rounded ? "mma bf16" : "mma"),
                          [&](const auto& a, int* err) {
                            return kernels::SparseAttentionMma(a, err, stream, rounded);
                          });
  }
  ExpectPagedEqualsFlat(Sequences(64, 128, "prefill mma.sync"), [&](const auto& a, int* err) {
    return kernels::SparseAttentionPrefill(a, err, stream);
  });
  for (int splits : {1, 2, 0}) {
    kernels::SetAttnWgmmaSplits(splits);
    ExpectPagedEqualsFlat(Sequences(64, 512, "wgmma splits " + std::to_string(splits)),
                          [&](const auto& a, int* err) {
                            return kernels::SparseAttentionPrefillWgmma(a, err, stream);
                          });
  }
  kernels::SetAttnWgmmaSplits(0);
}

// The CPU reference reads the same rows too (it is the model's other backend).
TEST_F(CudaAttentionPagedTest, CpuReferenceReadsTheSameRows) {
  const AttnInputs in = MakeInputs(Sequences(4, 64, "cpu"));
  std::vector<float> flat(in.out_size()), paged(in.out_size());
  cpu_.SparseAttention(in.HostArgs(flat.data()));
  const PagedLayout l = Layout(in, 5, rng_);
  const std::vector<int64_t> bases = l.Bases(l.arena.data(), in.d);
  ASSERT_TRUE(cpu_.SparseAttentionReadsPagedEntries());
  cpu_.SparseAttention(l.Args(in.HostArgs(paged.data()), bases.data()));
  EXPECT_TRUE(BitExact(paged, flat));
}

// An id whose block is past the table (comp_max_blocks) is out of range like one past
// comp_len: flagged, not attended, nothing read from where the table does not point.
TEST_F(CudaAttentionPagedTest, IdPastTheTableIsFlagged) {
  AttnCase c = Sequences(16, 64, "past the table");
  c.empty_every = 0;  // every token selects its last row (block 10 of 41 rows) among others
  const AttnInputs in = MakeInputs(c);
  std::vector<int64_t> bases;
  model::SparseAttentionArgs paged = Paged(in, GpuArgs(in), 4, &bases);
  // A one-block table: each token's first block only.
  std::vector<int64_t> first(in.tokens);
  for (int64_t t = 0; t < in.tokens; ++t) first[t] = bases[t * paged.comp_max_blocks];
  paged.comp_bases = Table(first), paged.comp_max_blocks = 1;
  cudaStream_t stream = gpu_->stream();
  const Kernel launches[] = {
      [&](const auto& a, int* err) { return kernels::SparseAttention(a, err, stream); },
      [&](const auto& a, int* err) { return kernels::SparseAttentionMma(a, err, stream, true); }};
  for (const Kernel& kernel : launches) {
    const Result got = Run(kernel, paged, in.out_size());
    EXPECT_EQ(got.error_word & kernels::kErrSelectionOutOfRange, kernels::kErrSelectionOutOfRange);
    for (float v : got.out) ASSERT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace deepinfer::backend::cuda::testing

// The pipelined one-row indexer kernel (k_indexer_mma.cu) against the session-6 kernel
// (bitwise), and keys read in place through per-row block tables (IndexerScoresMmaPaged,
// bitwise equal to the contiguous call). Fixtures: cuda_indexer_test_util.h.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_indexer_test_util.h"
#include "backend/cuda/kernels_indexer.h"

namespace deepinfer::backend::cuda::testing {
namespace {

// ---- The pipelined one-row kernel against the session-6 kernel, and paged keys. ----

class CudaIndexerPipelineTest : public CudaIndexerGroupTest {
 protected:
  // Sets a few keys and q values to special floats (NaN with payloads, one of them exactly
  // bf16 (low 16 bits zero, which the split must still quiet), +-inf, -0, subnormals, bf16
  // subnormals), in whole 4-value groups and alone.
  void AddSpecialValues(IdxCase& c) {
    const uint32_t bits[] = {0x7FA00000u, 0xFFC00001u, 0x7F800001u, 0x7F800000u, 0xFF800000u,
                             0x80000000u, 0x00000001u, 0x00010000u, 0x807F0000u, 0x3F800001u};
    const auto put = [&](std::vector<float>& v, int64_t at, uint32_t b) {
      float x;
      std::memcpy(&x, &b, 4);
      v[at % static_cast<int64_t>(v.size())] = x;
    };
    for (int i = 0; i < 10; ++i) {
      put(c.keys, 4 * (977 * i + 5), bits[i]);          // first of a 4-value group
      put(c.keys, 4 * (613 * i + 3) + 2, bits[9 - i]);  // inside one
      put(c.q, 4 * (1601 * i + 7) + 1, bits[i]);
    }
    for (int i = 0; i < 4; ++i) put(c.keys, 4 * (311 * i + 11) + i, 0x7FA00000u);
  }

  // kernels::IndexerScoresMmaReference (the session-6 one-row kernel) on all rows.
  std::vector<float> Reference(const IdxCase& c,
                               kernels::IndexerSums sums = kernels::IndexerSums::kExact) {
    float* out = PoisonedFloats(c.T * c.n_keys);
    EXPECT_EQ(kernels::IndexerScoresMmaReference(ToGpu(c.q), ToGpu(c.w), c.T, c.heads, c.dim,
                                                 ToGpu(c.keys), ToGpu(c.offset), ToGpu(c.len),
                                                 c.n_keys, ToGpu(c.q_pos), c.ratio, c.scale, out,
                                                 gpu_->stream(), sums),
              cudaSuccess);
    return FromGpu(out, c.T * c.n_keys);
  }

  // Row t's visible key count (the contract's min(key_len, n_keys, (q_pos + 1) / ratio)).
  static int64_t Visible(const IdxCase& c, int64_t t) {
    return std::min({static_cast<int64_t>(c.len[t]), c.n_keys,
                     (static_cast<int64_t>(c.q_pos[t]) + 1) / c.ratio});
  }

  // Every row's keys copied into blocks of rows_per_block keys, placed in a shuffled order
  // in one pool with a NaN row after each block; rows of one sequence share their blocks.
  // Table entries past the blocks of a row's visible keys hold an unmapped address (a read
  // would fault). key_len = the case's (or null).
  kernels::PagedKeys BuildPaged(const IdxCase& c, int64_t rows_per_block, bool with_key_len) {
    const int64_t dim = c.dim, slot_rows = rows_per_block + 1;
    // Blocks of each sequence (consecutive rows of equal key offset and length; an empty
    // sequence shares its offset with the next one), numbered in order of appearance.
    std::vector<int64_t> first_block(c.T);
    std::vector<bool> shares(c.T, false);  // row t uses row t - 1's blocks
    int64_t n_blocks = 0, max_blocks = 1;
    for (int64_t t = 0; t < c.T; ++t) {
      shares[t] = t > 0 && c.offset[t] == c.offset[t - 1] && c.len[t] == c.len[t - 1];
      if (shares[t]) {
        first_block[t] = first_block[t - 1];
        continue;
      }
      const int64_t blocks = (c.len[t] + rows_per_block - 1) / rows_per_block;
      first_block[t] = n_blocks;
      n_blocks += blocks;
      max_blocks = std::max(max_blocks, blocks + 1);
    }
    std::vector<int64_t> slot(n_blocks);
    for (int64_t b = 0; b < n_blocks; ++b) slot[b] = b;
    std::shuffle(slot.begin(), slot.end(), rng_);
    std::vector<float> pool(std::max<int64_t>(n_blocks, 1) * slot_rows * dim,
                            std::numeric_limits<float>::quiet_NaN());
    for (int64_t t = 0; t < c.T; ++t) {
      if (shares[t]) continue;
      for (int64_t j = 0; j < c.len[t]; ++j) {
        const int64_t b = first_block[t] + j / rows_per_block;
        std::copy_n(c.keys.begin() + (c.offset[t] + j) * dim, dim,
                    pool.begin() + (slot[b] * slot_rows + j % rows_per_block) * dim);
      }
    }
    const float* dev_pool = ToGpu(pool);
    std::vector<int64_t> table(c.T * max_blocks, int64_t{0x10});  // unmapped
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t used = (Visible(c, t) + rows_per_block - 1) / rows_per_block;
      for (int64_t i = 0; i < used; ++i) {
        table[t * max_blocks + i] =
            reinterpret_cast<int64_t>(dev_pool + slot[first_block[t] + i] * slot_rows * dim);
      }
    }
    std::vector<uint8_t> table_bytes(table.size() * sizeof(int64_t));
    std::memcpy(table_bytes.data(), table.data(), table_bytes.size());
    kernels::PagedKeys keys;
    keys.bases = reinterpret_cast<const int64_t*>(BytesToGpu(table_bytes));
    keys.max_blocks = max_blocks;
    keys.rows_per_block = rows_per_block;
    keys.key_len = with_key_len ? ToGpu(c.len) : nullptr;
    return keys;
  }

  // The scores through BuildPaged's block tables.
  std::vector<float> Paged(const IdxCase& c, int64_t rows_per_block, bool with_key_len = true,
                           kernels::IndexerSums sums = kernels::IndexerSums::kExact) {
    const kernels::PagedKeys keys = BuildPaged(c, rows_per_block, with_key_len);
    float* out = PoisonedFloats(c.T * c.n_keys);
    EXPECT_EQ(
        kernels::IndexerScoresMmaPaged(ToGpu(c.q), ToGpu(c.w), c.T, c.heads, c.dim, keys, c.n_keys,
                                       ToGpu(c.q_pos), c.ratio, c.scale, out, gpu_->stream(), sums),
        cudaSuccess);
    return FromGpu(out, c.T * c.n_keys);
  }

  // -inf exactly at the entries past each row's visible count, finite elsewhere (inputs
  // without special values).
  static void ExpectMasking(const IdxCase& c, const std::vector<float>& got) {
    int64_t bad = 0;
    for (int64_t t = 0; t < c.T; ++t) {
      const int64_t visible = Visible(c, t);
      for (int64_t g = 0; g < c.n_keys; ++g) {
        const float v = got[t * c.n_keys + g];
        const bool ok = g < visible ? std::isfinite(v) : (std::isinf(v) && v < 0);
        if (!ok && bad++ < 5) {
          ADD_FAILURE() << "row " << t << " key " << g << " visible " << visible << ": " << v;
        }
      }
    }
    EXPECT_EQ(bad, 0);
  }
};

// The pipelined one-row kernel (register prefetch, split shortcut for exactly-bf16 values)
// gives the session-6 kernel's bits: decode and prefill-like rows, all input kinds, special
// values, every applicable head / dim family (dim 256: tiles larger than the prefetch).
TEST_F(CudaIndexerPipelineTest, OneRowKernelBitwiseEqualToSession6Kernel) {
  for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32, IdxInputs::kMixed}) {
    for (bool special : {false, true}) {
      for (const auto& seqs : GroupSeqs()) {
        IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
        if (special) AddSpecialValues(c);
        SCOPED_TRACE(::testing::Message() << "T " << c.T << " inputs " << static_cast<int>(kind)
                                          << " special " << special);
        const std::vector<float> ref = Reference(c);
        EXPECT_TRUE(BitExact(Grouped(c, 1), ref));
        EXPECT_TRUE(BitExact(Gpu(c), ref));
      }
    }
  }
  for (auto [heads, dim] : std::vector<std::pair<int64_t, int64_t>>{
           {16, 16}, {48, 48}, {128, 128}, {32, 256}, {64, 256}}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kMixed, IdxInputs::kFp32}) {
      // FP4 fake-quantisation works on 32-value blocks; dims 16 and 48 take fp32 only.
      if ((dim % 32 == 0) == (kind == IdxInputs::kFp32)) continue;
      IdxCase c = MakeGroupCase({{200, 3}, {65, 2}, {700, 1}}, kind, false, heads, dim);
      SCOPED_TRACE(::testing::Message() << "heads " << heads << " dim " << dim);
      ASSERT_TRUE(kernels::IndexerMmaApplicable(ToGpu(c.q), ToGpu(c.keys), c.T, heads, dim, 4));
      EXPECT_TRUE(BitExact(Grouped(c, 1), Reference(c)));
    }
  }
}

// Long rows (8192 keys: a block walks up to ~21 tiles with the prefetch) at T = 1, 3, 40
// (each row its own keys, random positions).
TEST_F(CudaIndexerPipelineTest, LongRowsBitwiseEqualToSession6Kernel) {
  for (int64_t rows : {1, 3, 40}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32}) {
      std::vector<IdxSeq> seqs;
      for (int64_t r = 0; r < rows; ++r) seqs.push_back({r % 3 == 0 ? 8192 : 8192 - 37 * r, 1});
      const IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
      SCOPED_TRACE(::testing::Message() << "T " << c.T << " inputs " << static_cast<int>(kind));
      const std::vector<float> ref = Reference(c);
      EXPECT_TRUE(BitExact(Gpu(c), ref));
    }
  }
}

// The paged kernel's key -> block division (host arithmetic, the same expression as on the
// device): exact for block sizes 1 .. 2^31 and key indices 0 .. 2^31 - 1.
TEST(IndexerU31DividerTest, ExactQuotients) {
  std::mt19937_64 rng(7);
  std::vector<uint32_t> divisors;
  for (uint32_t d = 1; d <= 1100; ++d) divisors.push_back(d);
  for (uint32_t d :
       {4095u, 4096u, 4097u, 65535u, 65536u, 100000u, 1u << 30, (1u << 31) - 1, 1u << 31}) {
    divisors.push_back(d);
  }
  for (int i = 0; i < 200; ++i) divisors.push_back(1 + static_cast<uint32_t>(rng() % (1u << 31)));
  int64_t bad = 0;
  for (uint32_t d : divisors) {
    const kernels::U31Divider div = kernels::U31Divider::For(d);
    std::vector<uint32_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, (1u << 31) - 1, (1u << 31) - 2};
    for (uint32_t n = 0; n < 3000; ++n) ns.push_back(n);
    for (int i = 0; i < 3000; ++i) ns.push_back(static_cast<uint32_t>(rng() % (1u << 31)));
    for (uint32_t n : ns) {
      if (n >= (1u << 31)) continue;
      if (div.Divide(n) != n / d && bad++ < 5) {
        ADD_FAILURE() << n << " / " << d << ": got " << div.Divide(n) << " expected " << n / d;
      }
    }
  }
  EXPECT_EQ(bad, 0);
}

TEST_F(CudaIndexerPipelineTest, PagedApplicabilityAndArguments) {
  EXPECT_TRUE(kernels::IndexerMmaPagedApplicable(1, 64, 128, 4));
  EXPECT_TRUE(kernels::IndexerMmaPagedApplicable(65535, 16, 16, 1));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(0, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(65536, 64, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 64, 120, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 72, 128, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 128, 256, 4));
  EXPECT_FALSE(kernels::IndexerMmaPagedApplicable(1, 64, 128, 0));
  const float* p = reinterpret_cast<const float*>(uintptr_t{256});
  const int32_t* pos = reinterpret_cast<const int32_t*>(uintptr_t{256});
  float* out = reinterpret_cast<float*>(uintptr_t{256});
  kernels::PagedKeys keys;
  keys.bases = reinterpret_cast<const int64_t*>(uintptr_t{256});
  keys.max_blocks = 4;
  keys.rows_per_block = 16;
  const auto call = [&](const float* q, int64_t T, int64_t n_keys, const kernels::PagedKeys& k) {
    return kernels::IndexerScoresMmaPaged(q, p, T, 64, 128, k, n_keys, pos, 4, 1.0f, out,
                                          gpu_->stream());
  };
  EXPECT_EQ(call(p + 1, 1, 64, keys), cudaErrorInvalidValue);  // q not 16-byte aligned
  kernels::PagedKeys bad = keys;
  bad.bases = nullptr;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  bad = keys;
  bad.rows_per_block = 0;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  bad = keys;
  bad.max_blocks = 0;
  EXPECT_EQ(call(p, 1, 64, bad), cudaErrorInvalidValue);
  EXPECT_EQ(call(p, 1, 0, keys), cudaSuccess);  // empty work: nothing launched
  EXPECT_EQ(call(p, 0, 64, keys), cudaSuccess);
}

// Paged keys give the bits of the contiguous call: key counts 0, 1, 63, 64, 65, 1000, 8192
// (one sequence each, 1-2 rows with random positions), block sizes 1, 16, 64, 100, 256,
// shuffled blocks, n_keys past every row's keys and below the longest (rows cut at n_keys).
TEST_F(CudaIndexerPipelineTest, PagedBitwiseEqualToContiguous) {
  const std::vector<IdxSeq> seqs = {{0, 1},  {1, 2},    {63, 1},  {64, 2},
                                    {65, 1}, {1000, 2}, {8192, 2}};
  for (int64_t extra : {3, -5000}) {
    for (IdxInputs kind : {IdxInputs::kExactBf16, IdxInputs::kFp32}) {
      IdxCase c = MakeGroupCase(seqs, kind, /*causal=*/false);
      c.n_keys = 8192 + extra;
      const std::vector<float> contiguous = Grouped(c, 1);
      ExpectMasking(c, contiguous);
      for (int64_t rpb : {1, 16, 64, 100, 256}) {
        SCOPED_TRACE(::testing::Message() << "n_keys " << c.n_keys << " inputs "
                                          << static_cast<int>(kind) << " rows_per_block " << rpb);
        const std::vector<float> paged = Paged(c, rpb);
        EXPECT_TRUE(BitExact(paged, contiguous));
        ExpectMasking(c, paged);
      }
    }
  }
}

// IndexerSums::kTensorCore: paged keys give the contiguous one-row kernel's bits, which are the
// session-6 reference kernel's in the same mode (decode rows of FP4 keys, mixed term counts,
// and channel blocks 2^24 apart, where the chain must round: there the bits differ from the
// exact sums', so the mode reached every kernel).
TEST_F(CudaIndexerPipelineTest, TensorSumsPagedAndReferenceBitwise) {
  constexpr auto kTensor = kernels::IndexerSums::kTensorCore;
  const std::vector<IdxSeq> seqs = {{0, 1}, {63, 1}, {65, 2}, {1000, 2}, {4096, 2}};
  for (int kind = 0; kind < 3; ++kind) {  // FP4 grid, mixed, FP4 grid with scaled blocks
    IdxCase c = MakeGroupCase(seqs, kind == 1 ? IdxInputs::kMixed : IdxInputs::kExactBf16,
                              /*causal=*/false);
    if (kind == 2) ScaleChannelBlocks(c);
    SCOPED_TRACE(::testing::Message() << "inputs " << kind);
    const std::vector<float> contiguous = Grouped(c, 1, kTensor);
    ExpectMasking(c, contiguous);
    const std::vector<float> reference = Reference(c, kTensor);
    EXPECT_TRUE(BitExact(reference, contiguous));
    for (int64_t rpb : {16, 64, 100}) {
      SCOPED_TRACE(::testing::Message() << "rows_per_block " << rpb);
      const std::vector<float> paged = Paged(c, rpb, true, kTensor);
      EXPECT_TRUE(BitExact(paged, contiguous));
      if (kind == 2) {
        EXPECT_FALSE(BitExact(paged, Paged(c, rpb)));
      }
    }
    if (kind == 2) {
      EXPECT_FALSE(BitExact(contiguous, Grouped(c, 1)));
      EXPECT_FALSE(BitExact(reference, Reference(c)));
    }
  }
}

// Paged calls of many rows (the one-row kernel at every T) against the backend's contiguous
// choice (the row-group kernel from kIndexerGroupMinRows rows), causal prefill rows, mixed
// term counts and special values; and key_len null (n_keys keys for every row).
TEST_F(CudaIndexerPipelineTest, PagedManyRowsAndSpecialValues) {
  for (const auto& seqs :
       std::vector<std::vector<IdxSeq>>{{{1024, 600}}, {{1024, 121}, {0, 30}, {777, 149}}}) {
    for (int64_t rpb : {64, 100}) {
      IdxCase c = MakeGroupCase(seqs, IdxInputs::kMixed, /*causal=*/true);
      AddSpecialValues(c);
      SCOPED_TRACE(::testing::Message() << "T " << c.T << " rows_per_block " << rpb);
      EXPECT_TRUE(BitExact(Paged(c, rpb), Gpu(c)));
    }
  }
  IdxCase c = MakeGroupCase({{300, 4}}, IdxInputs::kFp32, /*causal=*/true);
  c.n_keys = 300;
  SCOPED_TRACE("key_len null");
  const std::vector<float> paged = Paged(c, 16, /*with_key_len=*/false);
  EXPECT_TRUE(BitExact(paged, Grouped(c, 1)));
  ExpectMasking(c, paged);
}

// Device time per call at decode shapes (each row its own keys, all visible; FP4 keys):
// contiguous keys, then paged keys in shuffled blocks of 64 and 256 keys (checked bitwise).
TEST_F(CudaIndexerPipelineTest, DISABLED_BenchPaged) {
  const int64_t ratio = 4;
  for (auto [T, keys_per_row] : std::vector<std::pair<int64_t, int64_t>>{
           {1, 1024}, {32, 1024}, {256, 1024}, {32, 8192}, {256, 8192}}) {
    IdxCase c = MakeCase({{keys_per_row, 1}}, kHeads, kDim, /*fp4=*/true, 0);
    c.T = T;  // every row: the first row's q, w and keys (copied T times)
    c.offset.resize(T);
    c.len.assign(T, static_cast<int32_t>(keys_per_row));
    c.q_pos.assign(T, static_cast<int32_t>(ratio * keys_per_row));
    std::vector<float> q1 = c.q, w1 = c.w, k1 = c.keys;
    c.q.clear();
    c.w.clear();
    c.keys.clear();
    for (int64_t t = 0; t < T; ++t) {
      c.offset[t] = static_cast<int32_t>(t * keys_per_row);
      c.q.insert(c.q.end(), q1.begin(), q1.end());
      c.w.insert(c.w.end(), w1.begin(), w1.end());
      c.keys.insert(c.keys.end(), k1.begin(), k1.end());
    }
    const float *q = ToGpu(c.q), *w = ToGpu(c.w), *keys = ToGpu(c.keys);
    const int32_t *off = ToGpu(c.offset), *len = ToGpu(c.len), *pos = ToGpu(c.q_pos);
    float* out = PoisonedFloats(T * keys_per_row);
    const double contiguous_us = DeviceMicrosPerCall([&] {
      kernels::IndexerScoresMma(q, w, T, kHeads, kDim, keys, off, len, c.n_keys, pos, ratio,
                                c.scale, out, gpu_->stream());
    });
    const std::vector<float> contiguous = FromGpu(out, T * keys_per_row);
    std::printf("IndexerScoresMma T=%lld keys/row=%lld fp4 contiguous: %.2f us/call (%.2f TB/s)\n",
                static_cast<long long>(T), static_cast<long long>(keys_per_row), contiguous_us,
                T * keys_per_row * kDim * 4.0 / contiguous_us * 1e-6);
    EXPECT_GT(contiguous_us, 0.0);
    for (int64_t rpb : {64, 256}) {
      const kernels::PagedKeys paged = BuildPaged(c, rpb, true);
      float* paged_out = PoisonedFloats(T * keys_per_row);
      const double us = DeviceMicrosPerCall([&] {
        kernels::IndexerScoresMmaPaged(q, w, T, kHeads, kDim, paged, c.n_keys, pos, ratio, c.scale,
                                       paged_out, gpu_->stream());
      });
      std::printf("  paged rows_per_block=%lld: %.2f us/call\n", static_cast<long long>(rpb), us);
      EXPECT_TRUE(BitExact(FromGpu(paged_out, T * keys_per_row), contiguous));
    }
  }
}

// Device time per call at decode (V4.1 shapes, each row its own sequence of 1024 or 8192
// keys, all visible), tensor cores on fp32 and FP4-fake-quantised inputs and, for
// comparison at 1024 keys, the fp32 kernel (reached by a q pointer that is not 16-byte
// aligned). TB/s: the keys' bytes per call over the time (short rows: L2-resident).
}  // namespace
}  // namespace deepinfer::backend::cuda::testing

// The compute interface the V4.1 model is written against.
//
// The model code (src/model) decides WHAT to compute (shapes, which tokens, which cache
// entries); a Backend decides HOW (src/backend/cpu: fp32 + OpenBLAS; a CUDA backend later).
// The model never loops over activation values itself.
//
// Conventions for every op:
// * Activations are row-major fp32 arrays in backend memory (host memory for the CPU
//   backend, device memory for a GPU backend). `ld*` arguments are row strides in elements.
// * Weights are described by WeightRef (packed storage + scales, exactly as in the
//   checkpoint); backends dequantise on the fly (a tile of rows at a time) so that a large
//   model is never dequantised wholesale.
// * Index arrays (positions, selections, expert ids) are int32 in backend memory.
// * Shapes are in elements; "T" is the number of token rows of the call.
#pragma once

#include <cstdint>
#include <limits>
#include <new>
#include <string>
#include <string_view>

#include "base/status.h"

namespace deepinfer::model {

// Storage formats of the release checkpoint (model.md §4.3).
enum class WeightFormat {
  kF32,         // fp32 [rows, cols]
  kBF16,        // bf16 [rows, cols]
  kFp8Block32,  // e4m3 [rows, cols] + e8m0 scale [ceil(rows/32), ceil(cols/32)]
  kFp8Row32,    // e4m3 [rows, cols] + e8m0 scale [rows, ceil(cols/32)] (Engram tables)
  kMxFp4,       // packed e2m1 [rows, cols/2] (low nibble = even column) + e8m0 [rows, cols/32]
};

std::string_view WeightFormatName(WeightFormat format);

// A read-only view of one stored weight matrix (memory-mapped checkpoint bytes). The
// logical matrix is W[rows, cols]; linear layers compute y = x W^T.
struct WeightRef {
  std::string name;  // checkpoint tensor name, for error messages
  WeightFormat format = WeightFormat::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;
  const uint8_t* scale = nullptr;  // e8m0 bytes, null for kF32/kBF16
  bool valid() const { return data != nullptr; }
};

// One expert's SwiGLU feed-forward: gate w1 [I, D], down w2 [D, I], up w3 [I, D].
struct ExpertWeights {
  WeightRef w1, w2, w3;
};

// The routed experts of a few token rows in one call (decode), with the routing decisions in
// backend memory (so no host round trip). For every token t < T:
//   y[t] = sum_{i < k} weights[t*k + i] * W2_e (silu(min(W1_e x_t, limit)) *
//          clamp(W3_e x_t, -limit, limit)),   e = experts[t*k + i]
// (no clamp if swiglu_limit <= 0), the sum taken in slot order i = 0 .. k-1, y overwritten.
struct RoutedExpertsArgs {
  const float* x = nullptr;  // [T, D] expert input (the ffn_norm output)
  int64_t T = 0;
  int64_t D = 0;
  const int32_t* experts = nullptr;  // [T, k] expert ids in [0, n_experts) (backend memory)
  const float* weights = nullptr;    // [T, k] routing weights, already scaled (backend memory)
  int64_t k = 0;
  const ExpertWeights* table = nullptr;  // [n_experts] (host memory), all of one shape
  int64_t n_experts = 0;
  float swiglu_limit = 0.0f;
  float* y = nullptr;  // [T, D]
};

// One device-to-device copy of CopyDeviceMany.
struct DeviceCopy {
  void* dst = nullptr;
  const void* src = nullptr;
  int64_t bytes = 0;
};

// One output of Backend::LinearMany: y[t, i] (+)= sum_k x[t, k] * w[row0 + i, k], i < n_rows.
struct LinearOut {
  const WeightRef* w = nullptr;
  int64_t row0 = 0;
  int64_t n_rows = 0;
  float* y = nullptr;
  int64_t ldy = 0;
  bool accumulate = false;
};

// QAT fake-quantisation points of the reference (goldens README "What the reference
// computes" 1-3). Each rounds values in place to what the packed format can hold.
enum class FakeQuantKind {
  kFp8Block32Pow2,  // window KV: e4m3, blocks of 32, scale 2^ceil(log2(max(amax,1e-4)/448))
  kFp4Block16E4m3,  // compressed KV: e2m1, blocks of 16, scale e4m3(max(amax,6*2^-9)/6)
  kFp4Block32Pow2,  // indexer q/k: e2m1, blocks of 32, scale 2^ceil(log2(max(amax,6*2^-126)/6))
};

// Values per quantisation block of a FakeQuantKind (a row's length must be a multiple).
inline constexpr int FakeQuantBlock(FakeQuantKind kind) {
  return kind == FakeQuantKind::kFp4Block16E4m3 ? 16 : 32;
}

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// mHC (manifold-constrained hyper-connections) parameters of one site.
struct HcSiteWeights {
  const float* fn = nullptr;     // [(2+hc)*hc, hc*D] fp32
  const float* scale = nullptr;  // [3]
  const float* base = nullptr;   // [(2+hc)*hc]
};

// Sparse attention over a window of per-layer keys plus selected compressed entries.
// K = V (single shared latent head of dim `head_dim`).
struct SparseAttentionArgs {
  const float* q = nullptr;        // [T, heads, head_dim]
  const int32_t* q_pos = nullptr;  // [T] absolute positions of the queries
  int64_t tokens = 0;
  int64_t heads = 0;
  int64_t head_dim = 0;
  const float* window_kv = nullptr;     // [n_window, head_dim] (keys = values)
  const int32_t* window_pos = nullptr;  // [n_window] positions of those rows
  int64_t n_window = 0;
  int64_t window = 0;              // query p sees window keys p-window+1 .. p
  const float* comp_kv = nullptr;  // [n_comp, head_dim] compressed entries
  int64_t n_comp = 0;
  const int32_t* selection = nullptr;  // [T, n_select] entry ids, -1 = empty slot
  int64_t n_select = 0;
  const float* sinks = nullptr;  // [heads] sink logits (denominator only)
  float scale = 1.0f;            // softmax scale applied to q.k
  int32_t unused = 0;            // explicit, so the struct has no padding bytes (CUDA graphs
                                 // compare a launch's parameter bytes)
  float* out = nullptr;          // [T, heads, head_dim]
  // Several sequences in one call (varlen), all optional (null = the single-sequence meaning
  // above): token t sees only window rows [window_start[t], window_start[t] + window_len[t])
  // of window_kv / window_pos, and its selection ids index comp_kv rows from comp_offset[t]
  // (row comp_offset[t] + id, id < comp_len[t]; an id >= comp_len[t] is out of range).
  // n_window and n_comp are then the total rows of the shared buffers.
  const int32_t* window_start = nullptr;  // [T]
  const int32_t* window_len = nullptr;    // [T]
  const int32_t* comp_offset = nullptr;   // [T]
  const int32_t* comp_len = nullptr;      // [T]
  // Paged compressed entries (optional, for backends whose SparseAttentionReadsPagedEntries()
  // is true): with comp_bases set, entry id of token t (0 <= id < comp_len[t], comp_len then
  // required) is the head_dim floats at address comp_bases[t * comp_max_blocks + id /
  // comp_rows_per_block] + (id % comp_rows_per_block) * head_dim (addresses as int64, backend
  // memory, 16-byte aligned); an id whose block is >= comp_max_blocks is out of range like an
  // id >= comp_len[t]. comp_kv, n_comp and comp_offset are then unused (null / 0). The same
  // rows as a gathered comp_kv give the same result (bitwise where the backend runs the same
  // kernel): this only saves the gather.
  const int64_t* comp_bases = nullptr;
  int64_t comp_max_blocks = 0;
  int64_t comp_rows_per_block = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Waits for all work issued so far and returns the first error the backend hit, if any.
  // Backends whose ops run synchronously and cannot fail (the CPU reference) return OK.
  // Callers check it after a forward pass: ops themselves return nothing.
  virtual base::Status Synchronize() { return base::Status::Ok(); }

  // --- concurrency hints --------------------------------------------------------------
  // The ops issued between BeginSideBranch() and EndSideBranch() (the side branch) may run
  // concurrently with the ops issued after EndSideBranch() until JoinSideBranch() (the main
  // branch); ops after JoinSideBranch() run after both. Calls come in exactly this order and
  // do not nest. The caller guarantees that neither branch writes memory the other reads or
  // writes, and that nothing the side branch writes is read before the join. Memory freed
  // in either branch is not reused until the join. Results must not depend on whether the
  // branches overlap: a backend may ignore the hints (the default; ops then run in the
  // order issued). `rows`: the token rows the branches work on (overlap may not pay for
  // large batches, whose kernels fill the device on their own).
  virtual void BeginSideBranch(int64_t /*rows*/) {}
  virtual void EndSideBranch() {}
  virtual void JoinSideBranch() {}

  // --- memory -------------------------------------------------------------------------
  // Backend-memory helpers so that the model can stage host data (ids, positions).
  // n floats / int32s, zero-filled.
  virtual float* AllocFloats(int64_t n) = 0;
  virtual int32_t* AllocInts(int64_t n) = 0;
  // n floats (or int32s: same bytes) whose contents are unspecified, for buffers written
  // before they are read (a GPU backend then skips the zero-fill launch). The CPU reference
  // fills them with the quiet-NaN pattern 0x7FC00001 (as int32 a huge id), so that a read
  // before a write shows up in its tests as NaN logits or an out-of-range id.
  virtual float* AllocUninitialized(int64_t n) { return AllocFloats(n); }
  virtual void Free(void* p) = 0;
  // Host memory (n floats, contents unspecified) that CopyToHost fills fastest: page-locked
  // on a GPU backend (a device-to-host copy into pageable memory ran at ~12 GB/s on the H200
  // machine, into page-locked memory at ~50 GB/s). Allocation may be slow: keep and reuse
  // such buffers. Null if it cannot be had. Free with FreeHostFloats.
  virtual float* AllocHostFloats(int64_t n) { return new (std::nothrow) float[n]; }
  virtual void FreeHostFloats(float* p) { delete[] p; }
  virtual void CopyToDevice(void* dst, const void* src, int64_t bytes) = 0;
  virtual void CopyToHost(void* dst, const void* src, int64_t bytes) = 0;
  virtual void CopyDevice(void* dst, const void* src, int64_t bytes) = 0;
  // Many copies in one call (a GPU backend runs them as one launch). Destinations must not
  // overlap each other or any source. The default issues them one by one.
  // (Pointer + count rather than std::span: this header is also compiled as C++17 by nvcc.)
  virtual void CopyDeviceMany(const DeviceCopy* copies, int64_t n) {
    for (int64_t i = 0; i < n; ++i) CopyDevice(copies[i].dst, copies[i].src, copies[i].bytes);
  }
  virtual void Fill(float* x, int64_t n, float value) = 0;

  // --- dense algebra ------------------------------------------------------------------
  // y[t, i] = sum_k x[t, k] * W[row0 + i, k] for i < n_rows (W has cols == K).
  // If accumulate, adds into y instead of overwriting.
  virtual void Linear(const float* x, int64_t T, int64_t ldx, const WeightRef& w, int64_t row0,
                      int64_t n_rows, float* y, int64_t ldy, bool accumulate = false) = 0;
  // Several Linears of the same x (same K): outs[i] as Linear(x, T, ldx, *outs[i].w, ..),
  // each with bitwise the result of its own call. No out's y may overlap x or another y.
  // The default calls Linear for each; a backend may share x's preparation and the launch.
  virtual void LinearMany(const float* x, int64_t T, int64_t ldx, const LinearOut* outs, int64_t n);
  // Grouped (block-diagonal) product: W's rows form `groups` equal groups of R = w.rows /
  // groups; y[t, g*R + i] = sum_k x[t, g*x_group_stride + k] * W[g*R + i, k]. Equals one
  // Linear per group (the default); a backend may run it as one launch.
  virtual void LinearGrouped(const float* x, int64_t T, int64_t ldx, int64_t x_group_stride,
                             const WeightRef& w, int64_t groups, float* y, int64_t ldy);
  // out[i, :] = W[ids[i], :] dequantised (ids in host memory: they drive addressing).
  virtual void GatherRows(const WeightRef& w, const int64_t* host_ids, int64_t n, float* out) = 0;
  // y = a + b (elementwise, n values); y may alias a or b.
  virtual void Add(const float* a, const float* b, int64_t n, float* y) = 0;
  // x *= s (n values).
  virtual void Scale(float* x, int64_t n, float s) = 0;

  // --- normalisation / positional ------------------------------------------------------
  // y[r] = x[r] * rsqrt(mean(x[r]^2) + eps) (* weight if weight != null), rows of n.
  virtual void RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                       float eps, float* y, int64_t ldy) = 0;
  // Interleaved-pair RoPE on channels [offset, offset + 2*n_pairs) of each of `heads`
  // vectors per row: x[r, h*head_stride + offset + 2i .. +1] rotated by pos[r]*inv_freq[i]
  // (inverse = rotate by the negative angle). inv_freq in host memory [n_pairs].
  virtual void Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride,
                    int64_t offset, int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                    bool inverse) = 0;
  // In-place fake quantisation of `rows` rows of n values (n a multiple of the block).
  virtual void FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, FakeQuantKind kind) = 0;
  // Rope (forward) of x [rows, heads, head_dim] (contiguous: ld = heads * head_dim, pairs from
  // `offset`, inv_freq in host memory as for Rope), then FakeQuant of its rows * heads rows of
  // head_dim values (head_dim a multiple of the kind's block): the two calls by default; a backend
  // may fuse them (same bits).
  virtual void RopeFakeQuant(float* x, int64_t rows, int64_t heads, int64_t head_dim,
                             int64_t offset, int64_t n_pairs, const int32_t* pos,
                             const float* inv_freq, FakeQuantKind kind);

  // --- mHC ----------------------------------------------------------------------------
  // From streams x [T, hc, D]: pre [T, hc], post [T, hc], comb [T, hc, hc] (comb[j][k]).
  virtual void HcMix(const float* x, int64_t T, int64_t hc, int64_t D, const HcSiteWeights& w,
                     float norm_eps, float hc_eps, int sinkhorn_iters, float* pre, float* post,
                     float* comb) = 0;
  // y[t] = sum_k pre[t, k] * x[t, k, :].
  virtual void HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                          float* y) = 0;
  // HcCollapse into u0 [T, D], then y = RmsNorm(u0) (rows of D, weight may be null): the
  // same bits as the two calls (the default makes them; a backend may fuse them).
  virtual void HcCollapseNorm(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                              const float* weight, float eps, float* u0, float* y);
  // x[t, k] <- post[t, k] * y[t] + sum_j comb[t, j, k] * x[t, j]  (in place).
  virtual void HcExpand(const float* y, const float* post, const float* comb, int64_t T, int64_t hc,
                        int64_t D, float* x) = 0;

  // --- attention pieces ---------------------------------------------------------------
  virtual void SparseAttention(const SparseAttentionArgs& args) = 0;
  // Gated pooling of ratio-r groups: c, z [groups*r, n] -> out [groups, n],
  // out[g] = sum_i softmax_i(z[g*r+i]) * c[g*r+i] (softmax per channel over the r rows).
  virtual void GatedPool(const float* c, const float* z, int64_t groups, int64_t ratio, int64_t n,
                         float* out) = 0;
  // Lightning-indexer scores: s[t, g] = sum_h w[t,h] * relu(q[t,h] . k[g]) * scale, and
  // kNegInf where g >= (q_pos[t]+1)/ratio (entry not yet visible).
  virtual void IndexerScores(const float* q, const float* w, int64_t T, int64_t heads, int64_t dim,
                             const float* keys, int64_t n_keys, const int32_t* q_pos, int64_t ratio,
                             float scale, float* scores) = 0;
  // Several sequences in one call: row t scores entries 0 .. key_len[t]-1 of its own sequence,
  // stored at rows key_offset[t] .. of `keys`; s[t, g] for g < n_keys (the row stride) as
  // above, and kNegInf for g >= key_len[t]. key_offset / key_len: int32 [T], backend memory.
  virtual void IndexerScoresVarlen(const float* q, const float* w, int64_t T, int64_t heads,
                                   int64_t dim, const float* keys, const int32_t* key_offset,
                                   const int32_t* key_len, int64_t n_keys, const int32_t* q_pos,
                                   int64_t ratio, float scale, float* scores) = 0;
  // IndexerScoresVarlen with each row's keys read in place from its paged blocks: key
  // j < key_len[t] of row t is the `dim` floats at address key_bases[t * max_blocks +
  // j / rows_per_block] + (j % rows_per_block) * dim (key_bases: float addresses as int64,
  // key_len: int32 [T], both backend memory). The scores equal IndexerScoresVarlen's on the
  // same keys gathered (bitwise where the backend runs the same kernel). Called only after
  // IndexerPagedApplicable is true for the same T, heads, dim and ratio; a backend without it
  // keeps the gathered path (the model then gathers the keys first).
  virtual bool IndexerPagedApplicable(int64_t T, int64_t heads, int64_t dim, int64_t ratio) const {
    (void)T, (void)heads, (void)dim, (void)ratio;
    return false;
  }
  virtual void IndexerScoresPaged(const float* q, const float* w, int64_t T, int64_t heads,
                                  int64_t dim, const int64_t* key_bases, int64_t max_blocks,
                                  int64_t rows_per_block, const int32_t* key_len, int64_t n_keys,
                                  const int32_t* q_pos, int64_t ratio, float scale, float* scores);
  // Candidate blocks (two-level top-k): per row, block score = max over `block` entries,
  // the block of the newest visible entry (q_pos+1)/ratio-1 forced to +inf; keep the best
  // `keep_blocks` with a visible entry. mask[t, g] = 1 for entries in kept blocks.
  virtual void CandidateMask(const float* scores, int64_t T, int64_t n, const int32_t* q_pos,
                             int64_t ratio, int64_t block, int64_t keep_blocks, uint8_t* mask) = 0;
  // scores[t, g] = kNegInf where mask[t, g] == 0.
  virtual void ApplyMask(float* scores, const uint8_t* mask, int64_t T, int64_t n) = 0;
  // Per row, the ids of the k largest finite values (descending); -1 for slots whose
  // value would be -inf. idx [T, k].
  virtual void TopK(const float* scores, int64_t T, int64_t n, int64_t k, int32_t* idx) = 0;

  // Whether SparseAttention takes paged compressed entries (SparseAttentionArgs::comp_bases);
  // a backend without it gets them gathered (GatherSelectedRows) first.
  virtual bool SparseAttentionReadsPagedEntries() const { return false; }

  // Selected compressed entries gathered for SparseAttention (decode: a token attends at most
  // k entries, far fewer than a long sequence holds): for token t and slot s < k with
  // id = selection[t*k + s]: if 0 <= id < count[t], row t*k + s of out [T*k, d] is row `id` of
  // t's paged rows, at float address bases[t*max_blocks + id / rows_per_block] +
  // (id % rows_per_block) * d, and remapped[t*k + s] = s; id < 0 gives remapped -1, and
  // id >= count[t] gives remapped k (out of range for a comp_len of k: SparseAttention then
  // reports it); those rows of out are left as they are. selection, bases (addresses as
  // int64), count, out, remapped: backend memory.
  virtual void GatherSelectedRows(const int32_t* selection, int64_t T, int64_t k,
                                  const int64_t* bases, int64_t max_blocks, const int32_t* count,
                                  int64_t rows_per_block, int64_t d, float* out,
                                  int32_t* remapped) = 0;

  // --- sampling -----------------------------------------------------------------------
  // Greedy decoding on the backend, so that a step copies token ids instead of rows of
  // logits: out[r] = the index of the largest of x[r, 0 .. n) (row stride ld), the lowest
  // index on ties, exactly what the left-to-right scan `best = 0; if (x[t] > x[best]) best = t`
  // returns: NaN values are never chosen, except that a NaN x[r, 0] gives 0. out: int32
  // [rows], backend memory.
  virtual void ArgmaxRows(const float* x, int64_t rows, int64_t n, int64_t ld, int32_t* out) = 0;

  // --- MoE ----------------------------------------------------------------------------
  // sqrtsoftplus router: s = sqrt(softplus(logits)); experts = top-k of s + bias;
  // weights = s[picked] / (sum + 1e-20) * scale if renormalise, else s * scale.
  virtual void RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T,
                                 int64_t n_experts, int64_t k, bool renormalise, float scale,
                                 int32_t* experts, float* weights) = 0;
  // h = silu(min(gate, limit)) * clamp(up, -limit, limit) (no clamp if limit <= 0),
  // times row_scale[t] when row_scale != null. gate, up, h [T, n].
  virtual void SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                      const float* row_scale, float* h) = 0;
  // Fused routed experts (RoutedExpertsArgs). CanFuseRoutedExperts says whether this backend
  // runs RoutedExperts for T rows of experts shaped like `e`; if not, the model routes through
  // the host and runs each expert with Linear. RoutedExperts is called only after a true
  // answer for the same T and shape. The CPU reference never fuses.
  virtual bool CanFuseRoutedExperts(int64_t T, const ExpertWeights& e) const {
    (void)T;
    (void)e;
    return false;
  }
  virtual void RoutedExperts(const RoutedExpertsArgs& args);
  // Rows gather/scatter for expert dispatch: out[i] = x[rows[i]]; y[rows[i]] += v[i].
  virtual void GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                               int64_t width, float* out) = 0;
  virtual void ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows,
                              float* y, int64_t ld) = 0;

  // --- Engram -------------------------------------------------------------------------
  // For each token t and stream k (x [T, hc, D], key [T, hc, D], value [T, D],
  // q_weight/k_weight [hc, D]): q = x*rsqrt(mean x^2+eps)*q_weight,
  // k = key*rsqrt(mean key^2+eps)*k_weight, dot = sum(q*k)/sqrt(D);
  // gate = sigmoid(copysign(sqrt(max(|dot|,1e-6)), dot)); x[t,k] += gate * value[t].
  virtual void EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                          const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) = 0;
};

}  // namespace deepinfer::model

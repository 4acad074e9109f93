// CudaBackend: the bf16 cuBLAS Linear (LinearBf16Split / LinearBf16Gemm), the FP8-activation
// Linear paths (activation quantisation, dense and grouped LinearFp8, for few tokens the
// weight-streaming LinearStream, for more the bf16 cuBLAS GEMMs on fake-quantised activations
// and kept bf16 weight copies) and LinearGrouped's dispatch (FP8, the grouped GEMV, the
// grouped tensor-core GEMM, else one Linear per group).
#include <algorithm>
#include <bit>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kernels_fp8.h"
#include "backend/cuda/kernels_mma.h"
#include "backend/cuda/kernels_stream.h"
#include "base/check.h"

namespace deepinfer::backend::cuda {
namespace {

// bf16 values of a grouped weight dequantised at once (64 MiB; Linear's tiles hold as many).
constexpr int64_t kBf16TileValues = int64_t{32} << 20;

}  // namespace

CudaBackend::Fp8Input CudaBackend::QuantizeFp8(const float* x, int64_t T, int64_t K, int64_t ldx,
                                               int64_t extra_bytes, const char* what) {
  const int64_t act_bytes = kernels::Fp8ActivationBytes(T, K);
  auto* q = static_cast<uint8_t*>(TempBytes(static_cast<size_t>(act_bytes + extra_bytes)));
  if (q == nullptr) return {};
  Fp8Input in{q, kernels::Fp8ActivationScales(q, T, K), extra_bytes > 0 ? q + act_bytes : nullptr};
  if (!Check(kernels::QuantizeFp8Activations(x, T, K, ldx, in.q, in.scale, stream_), what)) {
    return {};
  }
  return in;
}

const uint16_t* CudaBackend::QuantizeFp8Bf16(const float* x, int64_t T, int64_t K, int64_t ldx) {
  auto* xq = static_cast<uint16_t*>(TempBytes(static_cast<size_t>(T * K) * sizeof(uint16_t)));
  if (xq == nullptr || !Check(kernels::QuantizeFp8ActivationsBf16(x, T, K, ldx, xq, stream_),
                              "Linear bf16 quantise")) {
    return nullptr;
  }
  return xq;
}

void CudaBackend::LinearFp8(const float* x, int64_t T, int64_t ldx, const kernels::DeviceWeight& w,
                            int64_t row0, int64_t n_rows, float* y, int64_t ldy, bool accumulate) {
  const Fp8Input in = QuantizeFp8(
      x, T, w.cols, ldx, kernels::Fp8LinearScratchBytes(n_rows, w.cols, T), "Linear fp8 quantise");
  if (in.q == nullptr) return;
  Check(
      kernels::LinearFp8(w, row0, n_rows, in.q, in.scale, T, y, ldy, accumulate, in.extra, stream_),
      "Linear fp8");
}

void CudaBackend::LinearFp8Bf16(const float* x, int64_t T, int64_t ldx,
                                const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows,
                                float* y, int64_t ldy, bool accumulate, const uint16_t* bf16_copy) {
  const uint16_t* xq = QuantizeFp8Bf16(x, T, w.cols, ldx);
  if (xq != nullptr) LinearBf16Gemm(&xq, 1, T, w, row0, n_rows, y, ldy, accumulate, bf16_copy);
}

void CudaBackend::LinearBf16Split(const float* x, int64_t T, int64_t ldx,
                                  const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows,
                                  float* y, int64_t ldy, bool accumulate, int terms) {
  CHECK(terms == 1 || terms == 3) << terms;
  const int64_t K = w.cols;
  auto* hi =
      static_cast<uint16_t*>(TempBytes(static_cast<size_t>(terms * T * K) * sizeof(uint16_t)));
  if (hi == nullptr) return;
  uint16_t* parts[3] = {hi, terms == 3 ? hi + T * K : nullptr,
                        terms == 3 ? hi + 2 * T * K : nullptr};
  if (!Check(kernels::SplitBf16(x, T, K, ldx, parts[0], parts[1], parts[2], stream_),
             "Linear bf16 split")) {
    return;
  }
  LinearBf16Gemm(parts, terms, T, w, row0, n_rows, y, ldy, accumulate);
}

void CudaBackend::LinearBf16Gemm(const uint16_t* const* parts, int terms, int64_t T,
                                 const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows,
                                 float* y, int64_t ldy, bool accumulate,
                                 const uint16_t* bf16_copy) {
  const int64_t K = w.cols;
  // A BF16 weight (or a kept bf16 copy) is multiplied in place (one GEMM over all rows);
  // other formats are dequantised to bf16 a tile of rows at a time into the fp32 scratch (two
  // values per float).
  const bool in_place = w.format == model::WeightFormat::kBF16 || bf16_copy != nullptr;
  const uint16_t* bf16_rows =
      bf16_copy != nullptr ? bf16_copy : static_cast<const uint16_t*>(w.data);
  const int64_t tile = in_place ? n_rows : std::min(TileRows(K), n_rows);
  auto* scratch =
      in_place ? nullptr : reinterpret_cast<uint16_t*>(LinearScratch((tile * K + 1) / 2));
  if (!in_place && scratch == nullptr) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t r = 0; r < n_rows; r += tile) {
    const int64_t n = std::min(tile, n_rows - r);
    const uint16_t* w_tile = in_place ? bf16_rows + (row0 + r) * K : scratch;
    if (!in_place &&
        !Check(kernels::DequantRowsBf16(w, row0 + r, n, scratch, stream_), "Linear dequant bf16")) {
      return;
    }
    // Column-major: y^T [n, T] (+)= W_tile [K, n]^T part^T [K, T], for each part in order.
    for (int part = 0; part < terms; ++part) {
      const float beta = part > 0 || accumulate ? one : zero;
      const int m = static_cast<int>(n), cols = static_cast<int>(T), k = static_cast<int>(K);
      const int ld_y = static_cast<int>(ldy);
      const uint16_t* a = w_tile;
      const uint16_t* b = parts[part];
      float* c = y + r;
      // Recorded for CUDA graphs while the tape records (see Blas); decode runs this for the
      // head and the router.
      const uint64_t key[] = {uint64_t(m),
                              uint64_t(cols),
                              uint64_t(k),
                              uint64_t(ld_y),
                              reinterpret_cast<uint64_t>(a),
                              reinterpret_cast<uint64_t>(b),
                              reinterpret_cast<uint64_t>(c),
                              std::bit_cast<uint32_t>(beta)};
      if (!Blas("Linear bf16 gemm", key, sizeof(key), [=](cublasHandle_t handle) {
            return cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a, CUDA_R_16BF,
                                k, b, CUDA_R_16BF, k, &beta, c, CUDA_R_32F, ld_y,
                                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
          })) {
        return;
      }
    }
  }
}

const uint16_t* CudaBackend::Fp8Bf16CopyFor(const kernels::DeviceWeight& w, int64_t T) {
  if (!Fp8UsesBf16Copy(T) || w.format != model::WeightFormat::kFp8Block32) return nullptr;
  const size_t bytes = static_cast<size_t>(w.rows) * static_cast<size_t>(w.cols) * 2;
  return static_cast<const uint16_t*>(weights_.DerivedCopy(
      w, WeightCache::CopyKind::kBf16, bytes, fp8_bf16_copy_budget_, kFp8Bf16CopyKeepFree,
      [this](const kernels::DeviceWeight& view, void* out) {
        return kernels::DequantRowsBf16(view, 0, view.rows, static_cast<uint16_t*>(out), stream_);
      }));
}

void CudaBackend::LinearFp8Stream(const float* x, int64_t T, int64_t ldx,
                                  const kernels::DeviceWeight& w, int64_t row0, int64_t n_rows,
                                  float* y, int64_t ldy, bool accumulate) {
  void* scratch = TempBytes(static_cast<size_t>(kernels::LinearStreamScratchBytes(T, w.cols)));
  if (scratch == nullptr) return;
  Check(kernels::LinearStream(w, row0, n_rows, x, T, ldx, y, ldy, accumulate, scratch, stream_),
        "Linear stream");
}

void CudaBackend::LinearGroupedFp8Stream(const float* x, int64_t T, int64_t ldx,
                                         const kernels::DeviceWeight& w, int64_t groups, float* y,
                                         int64_t ldy) {
  void* scratch =
      TempBytes(static_cast<size_t>(kernels::LinearStreamScratchBytes(T, groups * w.cols)));
  if (scratch == nullptr) return;
  Check(kernels::LinearStreamGrouped(w, groups, x, T, ldx, y, ldy, scratch, stream_),
        "LinearGrouped stream");
}

void CudaBackend::LinearGroupedFp8(const float* x, int64_t T, int64_t ldx,
                                   const kernels::DeviceWeight& w, int64_t groups, float* y,
                                   int64_t ldy) {
  // All groups' activations (contiguous in x) are quantised at once.
  const Fp8Input in =
      QuantizeFp8(x, T, groups * w.cols, ldx, kernels::Fp8LinearScratchBytes(w.rows, w.cols, T),
                  "LinearGrouped fp8 quantise");
  if (in.q == nullptr) return;
  Check(kernels::LinearFp8Grouped(w, groups, in.q, in.scale, T, y, ldy, in.extra, stream_),
        "LinearGrouped fp8");
}

void CudaBackend::LinearGroupedFp8Bf16(const float* x, int64_t T, int64_t ldx,
                                       const kernels::DeviceWeight& w, int64_t groups, float* y,
                                       int64_t ldy, const uint16_t* bf16_copy) {
  const int64_t K = w.cols, R = w.rows / groups;
  const uint16_t* xq = QuantizeFp8Bf16(x, T, groups * K, ldx);  // [T, groups * K]
  if (xq == nullptr) return;
  // Whole groups per weight tile, about kBf16TileValues bf16 values (at least one group), or
  // all groups of the kept copy.
  const int64_t tile =
      bf16_copy != nullptr ? groups : std::clamp<int64_t>(kBf16TileValues / (R * K), 1, groups);
  auto* scratch = bf16_copy != nullptr
                      ? nullptr
                      : reinterpret_cast<uint16_t*>(LinearScratch((tile * R * K + 1) / 2));
  if (bf16_copy == nullptr && scratch == nullptr) return;
  const float one = 1.0f, zero = 0.0f;
  for (int64_t g = 0; g < groups; g += tile) {
    const int64_t n = std::min(tile, groups - g);
    const uint16_t* w_tile = bf16_copy != nullptr ? bf16_copy + g * R * K : scratch;
    if (bf16_copy == nullptr && !Check(kernels::DequantRowsBf16(w, g * R, n * R, scratch, stream_),
                                       "LinearGrouped dequant bf16")) {
      return;
    }
    // Column-major, per group g: y_g^T [R, T] (ld ldy) = W_g [K, R]^T xq_g^T [K, T] (ld
    // groups * K); batch strides R * K (weight), K (x), R (y).
    const int m = static_cast<int>(R), cols = static_cast<int>(T), k = static_cast<int>(K);
    const int ld_xq = static_cast<int>(groups * K), ld_y = static_cast<int>(ldy);
    const int batches = static_cast<int>(n);
    const uint16_t* a = w_tile;
    const uint16_t* b = xq + g * K;
    float* c = y + g * R;
    const uint64_t key[] = {uint64_t(m),
                            uint64_t(cols),
                            uint64_t(k),
                            uint64_t(ld_xq),
                            uint64_t(ld_y),
                            uint64_t(batches),
                            reinterpret_cast<uint64_t>(a),
                            reinterpret_cast<uint64_t>(b),
                            reinterpret_cast<uint64_t>(c)};
    if (!Blas("LinearGrouped bf16 gemm", key, sizeof(key), [=](cublasHandle_t handle) {
          return cublasGemmStridedBatchedEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, m, cols, k, &one, a,
                                            CUDA_R_16BF, k, int64_t{m} * k, b, CUDA_R_16BF, ld_xq,
                                            k, &zero, c, CUDA_R_32F, ld_y, m, batches,
                                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
        })) {
      return;
    }
  }
}

void CudaBackend::LinearMany(const float* x, int64_t T, int64_t ldx, const model::LinearOut* outs,
                             int64_t n) {
  const bool candidate = linear_many_ && fp8_activations_ && T > 0 && !Fp8UsesBf16Gemm(T) &&
                         n >= 2 && n <= kernels::kMaxStreamTargets && !failed_ &&
                         Check(cudaSetDevice(device_), "cudaSetDevice");
  if (!candidate) return Backend::LinearMany(x, T, ldx, outs, n);
  kernels::DeviceWeight weights[kernels::kMaxStreamTargets];
  kernels::LinearStreamTarget targets[kernels::kMaxStreamTargets];
  bool all_tiles = true;  // every output would take LinearFp8 on its own
  for (int64_t i = 0; i < n; ++i) {
    const model::LinearOut& o = outs[i];
    CHECK(o.w != nullptr && o.w->valid()) << "LinearMany: output " << i << " has no weight";
    CHECK(o.row0 >= 0 && o.row0 + o.n_rows <= o.w->rows)
        << o.w->name << ": rows " << o.row0 << "+" << o.n_rows;
    base::StatusOr<kernels::DeviceWeight> dw = weights_.Get(*o.w);
    if (!dw.ok()) return Fail(dw.status());
    weights[i] = *dw;
    targets[i] = {&weights[i], o.row0, o.n_rows, o.y, o.ldy, o.accumulate};
    all_tiles =
        all_tiles && o.w->cols == outs[0].w->cols && kernels::Fp8LinearApplicable(weights[i]) &&
        !(Fp8UsesStream(T) && kernels::LinearStreamApplicable(weights[i], o.row0, o.n_rows, T));
  }
  const int count = static_cast<int>(n);
  const bool stream = Fp8UsesStream(T) && kernels::LinearStreamManyApplicable(targets, count, T);
  // Past the stream, each output on its own Linear on the block-128 path or with a kept bf16
  // copy (one GEMM each); without either, one shared quantisation and LinearFp8 per output.
  // (`candidate` excludes the bf16 GEMM's token counts, from which the block-128 path starts
  // by default: the first line matters only with a lower DEEPINFER_FP8_BLOCK128_MIN_TOKENS,
  // and then an output the path does not fit takes its own Linear's other paths.)
  if (!stream && Fp8UsesBlock128(T)) return Backend::LinearMany(x, T, ldx, outs, n);
  bool copies = !stream && Fp8UsesBf16Copy(T);
  for (int i = 0; copies && i < count; ++i) copies = Fp8Bf16CopyFor(weights[i], T) != nullptr;
  if (!stream && (!all_tiles || copies)) return Backend::LinearMany(x, T, ldx, outs, n);
  if (!Usable()) return;
  const int64_t K = outs[0].w->cols;
  if (stream) {
    void* scratch = TempBytes(static_cast<size_t>(kernels::LinearStreamScratchBytes(T, K)));
    if (scratch == nullptr) return;
    Check(kernels::LinearStreamMany(targets, count, x, T, ldx, scratch, stream_),
          "LinearMany stream");
  } else {  // one quantisation of x, then LinearFp8 per output (each output's own kernel)
    int64_t extra = 0;
    for (int i = 0; i < count; ++i) {
      extra = std::max(extra, kernels::Fp8LinearScratchBytes(targets[i].n_rows, K, T));
    }
    const Fp8Input in = QuantizeFp8(x, T, K, ldx, extra, "LinearMany fp8 quantise");
    if (in.q == nullptr) return;
    for (int i = 0; i < count; ++i) {
      const kernels::LinearStreamTarget& t = targets[i];
      if (!Check(kernels::LinearFp8(*t.w, t.row0, t.n_rows, in.q, in.scale, T, t.y, t.ldy,
                                    t.accumulate, in.extra, stream_),
                 "LinearMany fp8")) {
        break;
      }
    }
  }
  std::string names;
  if (timing_on_) {
    for (int64_t i = 0; i < n; ++i) names += (i > 0 ? "+" : "") + outs[i].w->name;
  }
  return Done("Linear", names);
}

void CudaBackend::LinearGrouped(const float* x, int64_t T, int64_t ldx, int64_t x_group_stride,
                                const model::WeightRef& w, int64_t groups, float* y, int64_t ldy) {
  CHECK(w.valid()) << "missing weight " << w.name;
  CHECK(groups > 0 && w.rows % groups == 0)
      << w.name << ": " << w.rows << " rows in " << groups << " groups";
  if (T == 0 || failed_) return;
  const int64_t R = w.rows / groups;
  if (fp8_activations_ && x_group_stride == w.cols &&
      Check(cudaSetDevice(device_), "cudaSetDevice")) {
    base::StatusOr<kernels::DeviceWeight> fw = weights_.Get(w);
    if (!fw.ok()) return Fail(fw.status());
    if (kernels::Fp8LinearGroupedApplicable(*fw, groups)) {
      if (!Usable()) return;
      const bool stream =
          Fp8UsesStream(T) && kernels::LinearStreamGroupedApplicable(*fw, groups, T);
      if (!stream && Fp8UsesBlock128(T) &&
          LinearGroupedFp8Block128(x, T, ldx, *fw, groups, y, ldy)) {
        return Done("Linear", w.name);
      }
      const uint16_t* copy = stream ? nullptr : Fp8Bf16CopyFor(*fw, T);
      if (Fp8UsesBf16Gemm(T) || copy != nullptr) {
        LinearGroupedFp8Bf16(x, T, ldx, *fw, groups, y, ldy, copy);
      } else if (stream) {
        LinearGroupedFp8Stream(x, T, ldx, *fw, groups, y, ldy);
      } else {
        LinearGroupedFp8(x, T, ldx, *fw, groups, y, ldy);
      }
      return Done("Linear", w.name);
    }
  }
  // Decide before the op starts (its timing record): the per-group Linear calls are ops too.
  // As in Linear: the GEMV for few rows, then the tensor-core skinny GEMM (all groups in one
  // launch; in batch-invariant mode always, in slices of <= 64 tokens).
  const bool gemv = T <= gemv_max_tokens_ && R % 32 == 0;
  const bool mma = !gemv && mma_max_tokens_ > 0 && (T <= mma_max_tokens_ || batch_invariant_);
  base::StatusOr<kernels::DeviceWeight> dw = base::InternalError("not fetched");
  if (!fp8_activations_ && (gemv || mma) && Check(cudaSetDevice(device_), "cudaSetDevice")) {
    dw = weights_.Get(w);
    if (!dw.ok()) return Fail(dw.status());
  }
  const int64_t slice = std::min(T, kernels::kMaxMmaTokens);
  if (dw.ok() && gemv && kernels::GemvGroupedApplicable(*dw, T, R)) {
    if (!Usable()) return;
    Check(kernels::LinearGemvGrouped(*dw, 0, w.rows, x, T, ldx, y, ldy, false, R, x_group_stride,
                                     stream_),
          "LinearGrouped gemv");
    return Done("Linear", w.name);
  }
  if (dw.ok() && mma && kernels::MmaLinearGroupedApplicable(*dw, slice, groups)) {
    if (!Usable()) return;
    for (int64_t t = 0; t < T; t += slice) {
      const int64_t n = std::min(slice, T - t);
      if (!Check(kernels::LinearMmaGrouped(*dw, groups, x + t * ldx, n, ldx, x_group_stride,
                                           y + t * ldy, ldy, stream_),
                 "LinearGrouped mma")) {
        break;
      }
    }
    return Done("Linear", w.name);
  }
  model::Backend::LinearGrouped(x, T, ldx, x_group_stride, w, groups, y, ldy);
}

}  // namespace deepinfer::backend::cuda

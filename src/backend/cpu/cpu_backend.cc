// CpuBackend: memory, dense algebra, normalisation, RoPE, fake-quant and mHC.
#include "backend/cpu/cpu_backend.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#include "backend/cpu/numerics.h"
#include "base/check.h"
#include "base/thread_pool.h"

namespace deepinfer::backend::cpu {

using model::FakeQuantKind;
using model::WeightRef;

namespace {

// Rows of a weight tile dequantised at once: bounded so the tile stays ~8 MiB.
int64_t TileRows(int64_t cols) {
  const int64_t max_floats = int64_t{2} << 20;
  return std::max<int64_t>(32, (max_floats / std::max<int64_t>(cols, 1)) / 32 * 32);
}

}  // namespace

CpuBackend::CpuBackend() {
  // GEMM parallelism comes from base::ThreadPool over output rows; OpenBLAS's own threads
  // busy-wait and oversubscribe small machines, so BLAS calls run single-threaded.
  openblas_set_num_threads(1);
}

float* CpuBackend::AllocFloats(int64_t n) {
  return static_cast<float*>(std::calloc(std::max<int64_t>(n, 1), sizeof(float)));
}
int32_t* CpuBackend::AllocInts(int64_t n) {
  return static_cast<int32_t*>(std::calloc(std::max<int64_t>(n, 1), sizeof(int32_t)));
}
float* CpuBackend::AllocUninitialized(int64_t n) {
  const int64_t count = std::max<int64_t>(n, 1);
  auto* p = static_cast<uint32_t*>(std::malloc(count * sizeof(uint32_t)));
  if (p != nullptr) std::fill(p, p + count, kUninitializedPattern);
  return reinterpret_cast<float*>(p);
}
void CpuBackend::Free(void* p) { std::free(p); }
void CpuBackend::CopyToDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void CpuBackend::CopyToHost(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void CpuBackend::CopyDevice(void* dst, const void* src, int64_t bytes) {
  if (bytes > 0) std::memmove(dst, src, bytes);
}
void CpuBackend::Fill(float* x, int64_t n, float value) { std::fill(x, x + n, value); }

// GEMMs accumulate in double (dgemm on exactly dequantised weights) and round once to fp32:
// each output is then (almost always) the correctly rounded dot product, independent of the
// number of rows in the call. This keeps chunked prefill bit-identical to one-shot prefill
// and minimises the distance to any fp32 reference, which matters because the QAT
// fake-quant points turn tiny differences into rounding flips (goldens README quirk 3).
void CpuBackend::Linear(const float* x, int64_t T, int64_t ldx, const WeightRef& w, int64_t row0,
                        int64_t n_rows, float* y, int64_t ldy, bool accumulate) {
  CHECK(w.valid()) << "missing weight " << w.name;
  if (T == 0 || n_rows == 0) return;
  const int64_t K = w.cols;
  std::vector<double> xd(T * K);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < K; ++k) xd[t * K + k] = x[t * ldx + k];
  }
  // Output rows [r0, r1): dequantise weight tiles and multiply (BLAS single-threaded; the
  // parallelism is over row ranges).
  auto run_rows = [&](int64_t r0, int64_t r1) {
    const int64_t tile = std::min(TileRows(K), r1 - r0);
    std::vector<float> scratch(tile * K);
    std::vector<double> wd(tile * K), yd(T * tile);
    for (int64_t r = r0; r < r1; r += tile) {
      const int64_t n = std::min(tile, r1 - r);
      DequantRows(w, row0 + r, n, scratch.data());
      std::copy(scratch.begin(), scratch.begin() + n * K, wd.begin());
      cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, static_cast<int>(T), static_cast<int>(n),
                  static_cast<int>(K), 1.0, xd.data(), static_cast<int>(K), wd.data(),
                  static_cast<int>(K), 0.0, yd.data(), static_cast<int>(n));
      for (int64_t t = 0; t < T; ++t) {
        float* yt = y + t * ldy + r;
        for (int64_t i = 0; i < n; ++i) {
          const float v = static_cast<float>(yd[t * n + i]);
          yt[i] = accumulate ? yt[i] + v : v;
        }
      }
    }
  };
  // Few token rows (decode): dequantise one weight row at a time and take the T dot
  // products directly (no packing), 4 double accumulators in a fixed order.
  auto run_rows_small = [&](int64_t r0, int64_t r1) {
    std::vector<float> row(K);
    for (int64_t r = r0; r < r1; ++r) {
      DequantRows(w, row0 + r, 1, row.data());
      for (int64_t t = 0; t < T; ++t) {
        const double* xt = xd.data() + t * K;
        double a0 = 0.0, a1 = 0.0, a2 = 0.0, a3 = 0.0;
        int64_t k = 0;
        for (; k + 4 <= K; k += 4) {
          a0 += xt[k] * row[k];
          a1 += xt[k + 1] * row[k + 1];
          a2 += xt[k + 2] * row[k + 2];
          a3 += xt[k + 3] * row[k + 3];
        }
        for (; k < K; ++k) a0 += xt[k] * row[k];
        const float v = static_cast<float>((a0 + a1) + (a2 + a3));
        float* yt = y + t * ldy + r;
        *yt = accumulate ? *yt + v : v;
      }
    }
  };
  const std::function<void(int64_t, int64_t)> body =
      T <= 4 ? std::function<void(int64_t, int64_t)>(run_rows_small)
             : std::function<void(int64_t, int64_t)>(run_rows);
  const int64_t work = (T + 4) * n_rows * K;  // dequant counts like a few token rows
  if (work < (int64_t{1} << 21)) {
    body(0, n_rows);
  } else {
    const int64_t min_rows = std::max<int64_t>(32, (int64_t{1} << 20) / ((T + 4) * K));
    base::ThreadPool::Default().ParallelFor(n_rows, min_rows, body);
  }
}

void CpuBackend::GatherRows(const WeightRef& w, const int64_t* host_ids, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    CHECK(host_ids[i] >= 0 && host_ids[i] < w.rows)
        << w.name << ": row id " << host_ids[i] << " out of range " << w.rows;
    DequantRows(w, host_ids[i], 1, out + i * w.cols);
  }
}

void CpuBackend::Add(const float* a, const float* b, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] + b[i];
}

void CpuBackend::Scale(float* x, int64_t n, float s) {
  for (int64_t i = 0; i < n; ++i) x[i] *= s;
}

void CpuBackend::RmsNorm(const float* x, int64_t rows, int64_t n, int64_t ldx, const float* weight,
                         float eps, float* y, int64_t ldy) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * ldx;
    float* yr = y + r * ldy;
    double sum = 0.0;
    for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(xr[i]) * xr[i];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) {
      const double v = xr[i] * inv;
      yr[i] = static_cast<float>(weight ? weight[i] * v : v);
    }
  }
}

void CpuBackend::Rope(float* x, int64_t rows, int64_t ld, int64_t heads, int64_t head_stride,
                      int64_t offset, int64_t n_pairs, const int32_t* pos, const float* inv_freq,
                      bool inverse) {
  std::vector<float> cosv(n_pairs), sinv(n_pairs);
  for (int64_t r = 0; r < rows; ++r) {
    const float p = static_cast<float>(pos[r]);
    for (int64_t i = 0; i < n_pairs; ++i) {
      const float angle = p * inv_freq[i];
      cosv[i] = std::cos(angle);
      sinv[i] = inverse ? -std::sin(angle) : std::sin(angle);
    }
    for (int64_t h = 0; h < heads; ++h) {
      float* v = x + r * ld + h * head_stride + offset;
      for (int64_t i = 0; i < n_pairs; ++i) {
        const float xe = v[2 * i], xo = v[2 * i + 1];
        v[2 * i] = xe * cosv[i] - xo * sinv[i];
        v[2 * i + 1] = xe * sinv[i] + xo * cosv[i];
      }
    }
  }
}

void CpuBackend::FakeQuant(float* x, int64_t rows, int64_t n, int64_t ld, FakeQuantKind kind) {
  const int block = model::FakeQuantBlock(kind);
  CHECK_EQ(n % block, 0) << "fake-quant length " << n << " not a multiple of " << block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < n; b += block) {
      float* v = x + r * ld + b;
      switch (kind) {
        case FakeQuantKind::kFp8Block32Pow2:
          FakeQuantFp8Pow2Block(v, block);
          break;
        case FakeQuantKind::kFp4Block16E4m3:
          FakeQuantFp4E4m3Block(v, block);
          break;
        case FakeQuantKind::kFp4Block32Pow2:
          FakeQuantFp4Pow2Block(v, block);
          break;
      }
    }
  }
}

namespace {

float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

// Sinkhorn-normalised comb from raw logits c [hc, hc] (row j, column k), in place.
void SinkhornComb(float* c, int64_t hc, float eps, int iters) {
  for (int64_t j = 0; j < hc; ++j) {  // softmax over k per row j, + eps
    float* row = c + j * hc;
    const float mx = *std::max_element(row, row + hc);
    float sum = 0.0f;
    for (int64_t k = 0; k < hc; ++k) sum += (row[k] = std::exp(row[k] - mx));
    for (int64_t k = 0; k < hc; ++k) row[k] = row[k] / sum + eps;
  }
  auto normalise_columns = [&] {
    for (int64_t k = 0; k < hc; ++k) {
      float sum = 0.0f;
      for (int64_t j = 0; j < hc; ++j) sum += c[j * hc + k];
      for (int64_t j = 0; j < hc; ++j) c[j * hc + k] /= sum + eps;
    }
  };
  auto normalise_rows = [&] {
    for (int64_t j = 0; j < hc; ++j) {
      float sum = 0.0f;
      for (int64_t k = 0; k < hc; ++k) sum += c[j * hc + k];
      for (int64_t k = 0; k < hc; ++k) c[j * hc + k] /= sum + eps;
    }
  };
  normalise_columns();
  for (int i = 1; i < iters; ++i) {
    normalise_rows();
    normalise_columns();
  }
}

}  // namespace

void CpuBackend::HcMix(const float* x, int64_t T, int64_t hc, int64_t D,
                       const model::HcSiteWeights& w, float norm_eps, float hc_eps,
                       int sinkhorn_iters, float* pre, float* post, float* comb) {
  const int64_t width = hc * D;
  const int64_t n_mix = (2 + hc) * hc;
  std::vector<float> normed(T * width), z(T * n_mix);
  RmsNorm(x, T, width, width, nullptr, norm_eps, normed.data(), width);
  // z = normed . fn^T, accumulated in double (see Linear).
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t m = 0; m < n_mix; ++m) {
      double acc = 0.0;
      const float* a = normed.data() + t * width;
      const float* f = w.fn + m * width;
      for (int64_t i = 0; i < width; ++i) acc += static_cast<double>(a[i]) * f[i];
      z[t * n_mix + m] = static_cast<float>(acc);
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    const float* zt = z.data() + t * n_mix;
    for (int64_t k = 0; k < hc; ++k) {
      pre[t * hc + k] = Sigmoid(zt[k] * w.scale[0] + w.base[k]) + hc_eps;
      post[t * hc + k] = 2.0f * Sigmoid(zt[hc + k] * w.scale[1] + w.base[hc + k]);
    }
    float* c = comb + t * hc * hc;
    for (int64_t i = 0; i < hc * hc; ++i) c[i] = zt[2 * hc + i] * w.scale[2] + w.base[2 * hc + i];
    SinkhornComb(c, hc, hc_eps, sinkhorn_iters);
  }
}

void CpuBackend::HcCollapse(const float* x, const float* pre, int64_t T, int64_t hc, int64_t D,
                            float* y) {
  for (int64_t t = 0; t < T; ++t) {
    float* yt = y + t * D;
    const float* xt = x + t * hc * D;
    for (int64_t d = 0; d < D; ++d) {
      double acc = 0.0;
      for (int64_t k = 0; k < hc; ++k) acc += static_cast<double>(pre[t * hc + k]) * xt[k * D + d];
      yt[d] = static_cast<float>(acc);
    }
  }
}

void CpuBackend::HcExpand(const float* y, const float* post, const float* comb, int64_t T,
                          int64_t hc, int64_t D, float* x) {
  std::vector<float> old(hc * D);
  for (int64_t t = 0; t < T; ++t) {
    float* xt = x + t * hc * D;
    std::copy(xt, xt + hc * D, old.begin());
    const float* c = comb + t * hc * hc;
    for (int64_t k = 0; k < hc; ++k) {
      for (int64_t d = 0; d < D; ++d) {
        double acc = static_cast<double>(post[t * hc + k]) * y[t * D + d];
        for (int64_t j = 0; j < hc; ++j) acc += static_cast<double>(c[j * hc + k]) * old[j * D + d];
        xt[k * D + d] = static_cast<float>(acc);
      }
    }
  }
}

}  // namespace deepinfer::backend::cpu

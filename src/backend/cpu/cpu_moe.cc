// CpuBackend: MoE routing and expert pieces, Engram gating.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/cpu/cpu_backend.h"

namespace deepinfer::backend::cpu {
namespace {

float Softplus(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }
float Sigmoid(float v) { return 1.0f / (1.0f + std::exp(-v)); }

}  // namespace

void CpuBackend::RouteSqrtSoftplus(const float* logits, const float* bias, int64_t T,
                                   int64_t n_experts, int64_t k, bool renormalise, float scale,
                                   int32_t* experts, float* weights) {
  std::vector<float> s(n_experts), biased(n_experts);
  std::vector<int32_t> order(n_experts);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < n_experts; ++e) {
      s[e] = std::sqrt(Softplus(logits[t * n_experts + e]));
      biased[e] = s[e] + (bias ? bias[e] : 0.0f);
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return biased[a] > biased[b] || (biased[a] == biased[b] && a < b);
    });
    float sum = 0.0f;
    for (int64_t i = 0; i < k; ++i) sum += s[order[i]];
    for (int64_t i = 0; i < k; ++i) {
      experts[t * k + i] = order[i];
      const float w = s[order[i]];
      weights[t * k + i] = (renormalise && k > 1) ? w / (sum + 1e-20f) * scale : w * scale;
    }
  }
}

void CpuBackend::SwiGlu(const float* gate, const float* up, int64_t T, int64_t n, float limit,
                        const float* row_scale, float* h) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t i = 0; i < n; ++i) {
      float g = gate[t * n + i];
      float u = up[t * n + i];
      if (limit > 0.0f) {
        u = std::clamp(u, -limit, limit);
        g = std::min(g, limit);
      }
      float v = g * Sigmoid(g) * u;
      if (row_scale) v *= row_scale[t];
      h[t * n + i] = v;
    }
  }
}

void CpuBackend::GatherTokenRows(const float* x, int64_t ld, const int32_t* host_rows, int64_t n,
                                 int64_t width, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    std::copy(x + host_rows[i] * ld, x + host_rows[i] * ld + width, out + i * width);
  }
}

void CpuBackend::ScatterAddRows(const float* v, int64_t n, int64_t width, const int32_t* host_rows,
                                float* y, int64_t ld) {
  for (int64_t i = 0; i < n; ++i) {
    float* dst = y + host_rows[i] * ld;
    for (int64_t j = 0; j < width; ++j) dst[j] += v[i * width + j];
  }
}

void CpuBackend::EngramGate(float* x, const float* key, const float* value, const float* q_weight,
                            const float* k_weight, int64_t T, int64_t hc, int64_t D, float eps) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t k = 0; k < hc; ++k) {
      float* xs = x + (t * hc + k) * D;
      const float* ks = key + (t * hc + k) * D;
      double sx = 0.0, sk = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        sx += static_cast<double>(xs[d]) * xs[d];
        sk += static_cast<double>(ks[d]) * ks[d];
      }
      const double rx = 1.0 / std::sqrt(sx / static_cast<double>(D) + eps);
      const double rk = 1.0 / std::sqrt(sk / static_cast<double>(D) + eps);
      double dot = 0.0;
      for (int64_t d = 0; d < D; ++d) {
        dot += (xs[d] * rx * q_weight[k * D + d]) * (ks[d] * rk * k_weight[k * D + d]);
      }
      dot /= std::sqrt(static_cast<double>(D));
      const float g = Sigmoid(
          static_cast<float>(std::copysign(std::sqrt(std::max(std::fabs(dot), 1e-6)), dot)));
      for (int64_t d = 0; d < D; ++d) xs[d] += g * value[t * D + d];
    }
  }
}

}  // namespace deepinfer::backend::cpu

#include "model/weights.h"

#include <string>

#include "base/clock.h"
#include "base/logging.h"
#include "tensor/dtype.h"

namespace deepinfer::model {
namespace {

using base::Status;
using base::StatusOr;
using tensor::DType;

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string ShapeText(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  for (int64_t d : dims) s += (s.size() > 1 ? ", " : "") + std::to_string(d);
  return s + "]";
}

// Looks tensors up by name and checks their dtype/shape; errors name the tensor.
class Binder {
 public:
  Binder(const io::Checkpoint& ckpt, Backend* backend) : ckpt_(ckpt), backend_(backend) {}

  StatusOr<const io::SafetensorsTensorInfo*> Expect(const std::string& name,
                                                    std::initializer_list<DType> dtypes,
                                                    std::initializer_list<int64_t> dims) {
    DI_ASSIGN_OR_RETURN(const io::SafetensorsTensorInfo* info, ckpt_.Info(name));
    bool dtype_ok = false;
    for (DType d : dtypes) dtype_ok |= info->dtype == d;
    if (!dtype_ok) {
      return base::InvalidArgumentError("tensor '" + name + "': unexpected dtype " +
                                        std::string(tensor::DTypeName(info->dtype)));
    }
    const tensor::Shape want(dims);
    if (!(info->shape == want)) {
      return base::InvalidArgumentError("tensor '" + name + "': shape " + info->shape.ToString() +
                                        ", expected " + ShapeText(dims));
    }
    return info;
  }

  StatusOr<const uint8_t*> Data(const std::string& name) {
    DI_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, ckpt_.Bytes(name));
    return bytes.data();
  }

  // E8M0 scale tensor [rows, cols]; byte 255 (NaN) rejected. The scan reads the bytes, so
  // it is bounded by a budget: a release checkpoint has ~17 GB of expert scales, which must
  // stay lazily mapped (the scan covers the first kScanBudget bytes, in binding order).
  StatusOr<const uint8_t*> Scale(const std::string& name, int64_t rows, int64_t cols) {
    DI_RETURN_IF_ERROR(Expect(name, {DType::kF8E8M0, DType::kU8}, {rows, cols}).status());
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(name));
    if (scanned_ + rows * cols > kScanBudget) {
      if (!scan_skipped_)
        LOG_INFO("E8M0 NaN scan stops at {} ({} MiB scanned)", name, scanned_ >> 20);
      scan_skipped_ = true;
      return data;
    }
    scanned_ += rows * cols;
    for (int64_t i = 0; i < rows * cols; ++i) {
      if (data[i] == tensor::kE8M0NaN) {
        return base::InvalidArgumentError("tensor '" + name + "': E8M0 NaN byte at element " +
                                          std::to_string(i));
      }
    }
    return data;
  }

  // `base` names the weight without ".weight" (e.g. "layers.0.attn.wq_a").
  StatusOr<WeightRef> Fp8(const std::string& base, int64_t n, int64_t k) {
    WeightRef w{base + ".weight", WeightFormat::kFp8Block32, n, k, nullptr, nullptr};
    DI_RETURN_IF_ERROR(Expect(w.name, {DType::kF8E4M3}, {n, k}).status());
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(w.name));
    w.data = data;
    DI_ASSIGN_OR_RETURN(w.scale, Scale(base + ".scale", CeilDiv(n, 32), CeilDiv(k, 32)));
    return w;
  }

  StatusOr<WeightRef> Fp8Rows(const std::string& base, int64_t n, int64_t k) {
    WeightRef w{base + ".weight", WeightFormat::kFp8Row32, n, k, nullptr, nullptr};
    DI_RETURN_IF_ERROR(Expect(w.name, {DType::kF8E4M3}, {n, k}).status());
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(w.name));
    w.data = data;
    DI_ASSIGN_OR_RETURN(w.scale, Scale(base + ".scale", n, CeilDiv(k, 32)));
    return w;
  }

  StatusOr<WeightRef> MxFp4(const std::string& base, int64_t n, int64_t k) {
    WeightRef w{base + ".weight", WeightFormat::kMxFp4, n, k, nullptr, nullptr};
    if (k % 32 != 0) return base::InvalidArgumentError("tensor '" + w.name + "': K % 32 != 0");
    DI_RETURN_IF_ERROR(Expect(w.name, {DType::kI8, DType::kU8}, {n, k / 2}).status());
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(w.name));
    w.data = data;
    DI_ASSIGN_OR_RETURN(w.scale, Scale(base + ".scale", n, k / 32));
    return w;
  }

  // A BF16 (or F32) matrix used directly by GEMMs.
  StatusOr<WeightRef> Dense(const std::string& name, int64_t n, int64_t k) {
    DI_ASSIGN_OR_RETURN(const io::SafetensorsTensorInfo* info,
                        Expect(name, {DType::kBF16, DType::kF32}, {n, k}));
    WeightRef w{name,    info->dtype == DType::kBF16 ? WeightFormat::kBF16 : WeightFormat::kF32,
                n,       k,
                nullptr, nullptr};
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(name));
    w.data = data;
    return w;
  }

  // A small BF16/F32 tensor of `n` values copied to fp32 backend memory.
  StatusOr<DeviceFloats> Small(const std::string& name, std::initializer_list<int64_t> dims) {
    DI_ASSIGN_OR_RETURN(const io::SafetensorsTensorInfo* info,
                        Expect(name, {DType::kBF16, DType::kF32}, dims));
    DI_ASSIGN_OR_RETURN(const uint8_t* data, Data(name));
    const int64_t n = info->shape.NumElements();
    std::vector<float> host(n);
    for (int64_t i = 0; i < n; ++i) {
      if (info->dtype == DType::kF32) {
        std::memcpy(&host[i], data + 4 * i, 4);
      } else {
        uint16_t bits;
        std::memcpy(&bits, data + 2 * i, 2);
        host[i] = tensor::BF16ToF32(bits);
      }
    }
    DeviceFloats out(backend_, n);
    backend_->CopyToDevice(out.data(), host.data(), n * sizeof(float));
    return out;
  }

 private:
  static constexpr int64_t kScanBudget = int64_t{256} << 20;
  const io::Checkpoint& ckpt_;
  Backend* backend_;
  int64_t scanned_ = 0;
  bool scan_skipped_ = false;
};

Status BindAttention(Binder& b, const io::ModelConfig& cfg, int l, AttentionWeights* a) {
  const io::TextConfig& t = cfg.text();
  const std::string p = "layers." + std::to_string(l) + ".attn.";
  const int64_t D = t.hidden_size, d = t.head_dim;
  DI_ASSIGN_OR_RETURN(a->wq_a, b.Fp8(p + "wq_a", t.q_lora_rank, D));
  DI_ASSIGN_OR_RETURN(a->wq_b, b.Fp8(p + "wq_b", cfg.q_proj_dim(), t.q_lora_rank));
  DI_ASSIGN_OR_RETURN(a->wkv, b.Fp8(p + "wkv", d, D));
  DI_ASSIGN_OR_RETURN(a->wo_a, b.Fp8(p + "wo_a", cfg.o_proj_dim(), cfg.o_group_in_dim()));
  DI_ASSIGN_OR_RETURN(a->wo_b, b.Fp8(p + "wo_b", D, cfg.o_proj_dim()));
  DI_ASSIGN_OR_RETURN(a->q_norm, b.Small(p + "q_norm.weight", {t.q_lora_rank}));
  DI_ASSIGN_OR_RETURN(a->kv_norm, b.Small(p + "kv_norm.weight", {d}));
  DI_ASSIGN_OR_RETURN(a->sinks, b.Small(p + "attn_sink", {t.num_attention_heads}));
  if (cfg.IsKvSource(l)) {
    DI_ASSIGN_OR_RETURN(a->comp_wkv, b.Dense(p + "compressor.wkv.weight", d, D));
    if (cfg.CompressRatio(l) > 1) {
      DI_ASSIGN_OR_RETURN(a->comp_wgate, b.Dense(p + "compressor.wgate.weight", d, D));
    }
    DI_ASSIGN_OR_RETURN(a->comp_norm, b.Small(p + "compressor.norm.weight", {d}));
  }
  if (cfg.IsIndexSource(l)) {
    DI_ASSIGN_OR_RETURN(a->idx_wq_b, b.Fp8(p + "indexer.wq_b", cfg.index_q_dim(), t.q_lora_rank));
    DI_ASSIGN_OR_RETURN(a->idx_weights_proj,
                        b.Dense(p + "indexer.weights_proj.weight", t.index_n_heads, D));
    if (cfg.IsKvSource(l)) {
      DI_ASSIGN_OR_RETURN(a->idx_wk, b.Dense(p + "indexer.wk.weight", t.index_head_dim, d));
      DI_ASSIGN_OR_RETURN(a->idx_k_norm, b.Small(p + "indexer.k_norm.weight", {t.index_head_dim}));
    }
  }
  return Status::Ok();
}

Status BindMoe(Binder& b, const io::ModelConfig& cfg, int l, MoeWeights* m) {
  const io::TextConfig& t = cfg.text();
  const std::string p = "layers." + std::to_string(l) + ".ffn.";
  const int64_t D = t.hidden_size, I = t.moe_intermediate_size;
  DI_ASSIGN_OR_RETURN(m->gate, b.Dense(p + "gate.weight", t.n_routed_experts, D));
  DI_ASSIGN_OR_RETURN(m->bias, b.Small(p + "gate.bias", {t.n_routed_experts}));
  m->experts.resize(t.n_routed_experts);
  for (int e = 0; e < t.n_routed_experts; ++e) {
    const std::string ep = p + "experts." + std::to_string(e) + ".";
    DI_ASSIGN_OR_RETURN(m->experts[e].w1, b.MxFp4(ep + "w1", I, D));
    DI_ASSIGN_OR_RETURN(m->experts[e].w2, b.MxFp4(ep + "w2", D, I));
    DI_ASSIGN_OR_RETURN(m->experts[e].w3, b.MxFp4(ep + "w3", I, D));
  }
  DI_ASSIGN_OR_RETURN(m->shared.w1, b.Fp8(p + "shared_experts.w1", I, D));
  DI_ASSIGN_OR_RETURN(m->shared.w2, b.Fp8(p + "shared_experts.w2", D, I));
  DI_ASSIGN_OR_RETURN(m->shared.w3, b.Fp8(p + "shared_experts.w3", I, D));
  return Status::Ok();
}

Status BindEngram(Binder& b, const io::ModelConfig& cfg, int l, EngramWeights* e) {
  const io::TextConfig& t = cfg.text();
  const std::string p = "layers." + std::to_string(l) + ".engram.";
  const int64_t D = t.hidden_size, hc = t.hc_mult;
  const int64_t rows = t.engram_num_embeddings[cfg.EngramIndex(l)];
  DI_ASSIGN_OR_RETURN(e->table, b.Fp8Rows(p + "embed", rows, t.engram_head_dim));
  DI_ASSIGN_OR_RETURN(e->wkv, b.Fp8(p + "wkv", (hc + 1) * D, cfg.engram_lookup_dim()));
  DI_ASSIGN_OR_RETURN(e->q_weight, b.Small(p + "q_weight", {hc, D}));
  DI_ASSIGN_OR_RETURN(e->k_weight, b.Small(p + "k_weight", {hc, D}));
  return Status::Ok();
}

Status BindLayer(Binder& b, const io::ModelConfig& cfg, int l, LayerWeights* w) {
  const io::TextConfig& t = cfg.text();
  const std::string p = "layers." + std::to_string(l) + ".";
  const int64_t D = t.hidden_size;
  DI_ASSIGN_OR_RETURN(w->attn_norm, b.Small(p + "attn_norm.weight", {D}));
  DI_ASSIGN_OR_RETURN(w->ffn_norm, b.Small(p + "ffn_norm.weight", {D}));
  for (const char* site : {"attn", "ffn"}) {
    HcSite& hc = std::string(site) == "attn" ? w->hc_attn : w->hc_ffn;
    const std::string hp = p + "hc_" + site + "_";
    DI_ASSIGN_OR_RETURN(hc.fn, b.Small(hp + "fn", {cfg.hc_mix_dim(), cfg.hc_stream_dim()}));
    DI_ASSIGN_OR_RETURN(hc.base, b.Small(hp + "base", {cfg.hc_mix_dim()}));
    DI_ASSIGN_OR_RETURN(hc.scale, b.Small(hp + "scale", {3}));
  }
  DI_RETURN_IF_ERROR(BindAttention(b, cfg, l, &w->attn));
  DI_RETURN_IF_ERROR(BindMoe(b, cfg, l, &w->ffn));
  if (cfg.IsEngramLayer(l)) {
    w->engram.emplace();
    DI_RETURN_IF_ERROR(BindEngram(b, cfg, l, &*w->engram));
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::unique_ptr<ModelWeights>> BindWeights(const io::Checkpoint& checkpoint,
                                                    const io::ModelConfig& cfg, Backend* backend) {
  const io::TextConfig& t = cfg.text();
  Binder b(checkpoint, backend);
  auto w = std::make_unique<ModelWeights>();
  DI_ASSIGN_OR_RETURN(w->embed, b.Dense("embed.weight", t.vocab_size, t.hidden_size));
  DI_ASSIGN_OR_RETURN(w->head, b.Dense("head.weight", t.vocab_size, t.hidden_size));
  DI_ASSIGN_OR_RETURN(w->norm, b.Small("norm.weight", {t.hidden_size}));
  w->layers.resize(t.num_hidden_layers);
  base::Stopwatch watch;
  double last_log = 0.0;
  for (int l = 0; l < t.num_hidden_layers; ++l) {
    DI_RETURN_IF_ERROR(BindLayer(b, cfg, l, &w->layers[l]));
    if (watch.ElapsedSeconds() - last_log > 2.0) {
      last_log = watch.ElapsedSeconds();
      LOG_INFO("binding weights: layer {}/{} ({:.1f} s)", l + 1, t.num_hidden_layers, last_log);
    }
  }
  return w;
}

}  // namespace deepinfer::model

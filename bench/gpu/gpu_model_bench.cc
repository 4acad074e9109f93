// gpu_model_bench: decode step times over a batch x context grid, prefill tokens/s, and a
// per-op breakdown, for one checkpoint on one backend (issue 9; bench/gpu/README.md).
//
// Decode: `batch` standalone sequences get a synthetic context of `context` tokens
// (Model::FillSyntheticContext: the same work per step as a real context), then one token per
// sequence per step; the step time is the wall time of Model::Forward, which includes the
// device synchronisation and copying every sequence's greedy token (taken on the device) to
// the host, or with --logits its whole logits row. Each figure is the
// median of --steps steps after 1 + --warmup-steps untimed steps. Bytes and FLOPs come from
// roofline.h; achieved GB/s and TFLOP/s are those over the measured time, and "of ceiling" divides
// by the figures of gpu_ceilings (--ceilings JSON) when given.
#include <cuda_profiler_api.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "base/logging.h"
#include "engine/model_engine.h"
#include "model/model.h"
#include "roofline.h"
#include "served_prefill.h"

namespace deepinfer::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::ordered_json;

struct Options {
  std::string model_dir;
  std::string backend = "cuda";
  std::vector<int64_t> batches = {1, 8, 32, 128, 256};
  std::vector<int64_t> contexts = {4096, 32768};
  std::vector<int64_t> prefills = {4096, 16384};
  std::vector<std::string> breakdowns = {"1:4096", "32:4096"};
  // Prompt lengths whose prefill gets a per-op breakdown and the GEMM part (empty: the first).
  std::vector<int64_t> prefill_breakdowns;
  // Prefill through the engine (served_prefill.h): prompt lengths x chunk budgets.
  std::vector<int64_t> served_prefills;
  std::vector<int64_t> step_budgets = {512, 2048, 8192};
  int steps = 5;
  // Untimed decode steps before the timed ones (beyond the first): with CUDA graphs on, a
  // step's graph is captured the second time its work is seen, and steady decode repeats
  // with period 2, so the first ~4 steps include captures.
  int warmup_steps = 4;
  int block_tokens = 256;
  double state_budget_gib = 90;
  std::string ceilings_json;
  std::string json_out;
  // One extra decode step per grid point between cudaProfilerStart/Stop, for
  // `ncu --profile-from-start off` (per-kernel device times of exactly one step).
  bool profile_step = false;
  // Decode steps return every sequence's logits row (copied to reused page-locked host
  // memory, as the engine does for a sampler with temperature > 0) instead of its greedy
  // token (taken on the device).
  bool logits = false;
};

struct Ceilings {
  double hbm_GBps = 0, fp8_tflops = 0, bf16_tflops = 0;
};

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

backend::cuda::CudaBackend* AsCuda(model::Backend* b) {
  return dynamic_cast<backend::cuda::CudaBackend*>(b);
}

ordered_json OpTable(backend::cuda::CudaBackend* cuda, double step_ms) {
  ordered_json ops = ordered_json::array();
  if (cuda == nullptr) return ops;
  std::printf("  %-48s %8s %10s %6s\n", "op", "calls", "total us", "share");
  for (const auto& op : cuda->TakeOpTimings()) {
    const double share = op.total_us / (step_ms * 1000);
    std::printf("  %-48s %8lld %10.1f %5.1f%%\n", op.label.c_str(),
                static_cast<long long>(op.calls), op.total_us, 100 * share);
    ops.push_back({{"op", op.label}, {"calls", op.calls}, {"total_us", op.total_us}});
  }
  return ops;
}

class Bench {
 public:
  Bench(const Options& o, engine::LoadedModel& m, Ceilings c)
      : opt_(o), model_(*m.model), backend_(m.backend.get()), ceil_(c), rng_(1234) {}

  base::Status Prepare() {
    const int64_t n = int64_t{1} << 20;
    std::normal_distribution<float> normal(0.0f, 0.5f);
    std::vector<float> host(n);
    // Rounded to bf16: real state rows are fake-quantised (FP8 / FP4 grids), hence exact in
    // bf16, which the tensor-core attention requires of its key/value rows.
    for (float& v : host) {
      uint32_t bits = std::bit_cast<uint32_t>(normal(rng_));
      bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;  // round to nearest even
      v = std::bit_cast<float>(bits);
    }
    values_ = model::DeviceFloats(backend_, n);
    backend_->CopyToDevice(values_.data(), host.data(), n * sizeof(float));
    // Warm-up: uploads every weight a token touches (experts on first use) and creates the
    // cuBLAS handles' workspaces.
    const auto t0 = Clock::now();
    model::SequenceState s = model_.NewSequence();
    std::vector<int32_t> prompt = Tokens(64);
    model::ForwardBatch b;
    b.chunks.push_back({&s, prompt, 0, false});
    DI_RETURN_IF_ERROR(model_.Forward(b).status());
    warmup_s_ = Seconds(t0, Clock::now());
    std::printf("warm-up (weight upload + first forward): %.1f s\n", warmup_s_);
    return base::Status::Ok();
  }

  ordered_json Decode(int64_t batch, int64_t context, bool breakdown) {
    ordered_json r = {{"batch", batch}, {"context", context}};
    const double state_gib = StateGiB(batch, context);
    if (state_gib > opt_.state_budget_gib) {
      r["skipped"] = "state " + std::to_string(state_gib) + " GiB over the budget";
      std::printf("decode B=%lld C=%lld: skipped (state %.1f GiB)\n", static_cast<long long>(batch),
                  static_cast<long long>(context), state_gib);
      return r;
    }
    std::vector<model::SequenceState> seqs;
    const auto t0 = Clock::now();
    for (int64_t i = 0; i < batch; ++i) {
      auto s = model_.NewSequence(opt_.block_tokens);
      if (!s.ok()) return Failed(r, s.status());
      const std::vector<int32_t> recent = Tokens(3);
      const base::Status st = model_.FillSyntheticContext(
          *s, context, values_.data() + (i * 7919) % 1000, values_.size() - 1000, recent);
      if (!st.ok()) return Failed(r, st);
      seqs.push_back(std::move(*s));
    }
    r["setup_s"] = Seconds(t0, Clock::now());
    std::vector<double> times, issue_times, warmup_ms;
    backend::cuda::CudaBackend* cuda = AsCuda(backend_);
    backend::cuda::StreamTape::Stats graphs_before;
    const int untimed = 1 + opt_.warmup_steps;
    for (int step = 0; step < untimed + opt_.steps; ++step) {
      if (step == untimed && cuda != nullptr) graphs_before = cuda->graph_stats();
      const auto a = Clock::now();
      double issue_s = 0;
      const base::Status st = Step(seqs, &issue_s);
      if (!st.ok()) return Failed(r, st);
      if (step >= untimed) {
        times.push_back(Seconds(a, Clock::now()));
        issue_times.push_back(issue_s);
      } else {
        warmup_ms.push_back(Seconds(a, Clock::now()) * 1e3);
      }
    }
    // The untimed steps: with CUDA graphs, the first sighting of a step's work runs op by op
    // and the second is captured, so these show what a new batch shape costs.
    r["warmup_step_ms"] = warmup_ms;
    if (cuda != nullptr) {  // how the timed steps were issued
      const backend::cuda::StreamTape::Stats& g = cuda->graph_stats();
      r["graph_launches"] = g.graph_launches - graphs_before.graph_launches;
      r["graph_captures"] = g.graph_captures - graphs_before.graph_captures;
      r["op_by_op_flushes"] = g.eager_flushes - graphs_before.eager_flushes;
    }
    const double step_s = Median(times);
    r["host_issue_ms"] = Median(issue_times) * 1e3;
    const StepCost cost = DecodeStepCost(model_.config(), batch, context);
    Fill(r, step_s, cost);
    r["tokens_per_s"] = batch / step_s;
    r["per_user_tokens_per_s"] = 1 / step_s;
    std::printf(
        "decode B=%-4lld C=%-6lld step %8.2f ms  %9.1f tok/s  %7.1f GB/s (%5.1f%% HBM)  "
        "%6.2f TFLOP/s  host issue %.2f ms\n",
        static_cast<long long>(batch), static_cast<long long>(context), step_s * 1e3,
        batch / step_s, cost.bytes() / step_s / 1e9,
        ceil_.hbm_GBps > 0 ? 100 * cost.bytes() / step_s / 1e9 / ceil_.hbm_GBps : 0.0,
        cost.flops() / step_s / 1e12, r["host_issue_ms"].get<double>());
    if (r.contains("graph_launches")) {
      std::string warmup;
      for (double ms : warmup_ms) {
        char text[32];
        std::snprintf(text, sizeof(text), " %.2f", ms);
        warmup += text;
      }
      std::printf(
          "  timed steps: %lld graph launches (%lld captures), %lld op-by-op flushes; "
          "untimed steps (ms):%s\n",
          static_cast<long long>(r["graph_launches"].get<int64_t>()),
          static_cast<long long>(r["graph_captures"].get<int64_t>()),
          static_cast<long long>(r["op_by_op_flushes"].get<int64_t>()), warmup.c_str());
    }
    if (opt_.profile_step && AsCuda(backend_) != nullptr) {
      cudaProfilerStart();
      const base::Status st = Step(seqs);
      cudaProfilerStop();
      if (!st.ok()) return Failed(r, st);
    }
    if (breakdown && AsCuda(backend_) != nullptr) {
      AsCuda(backend_)->SetOpTiming(true);
      const auto a = Clock::now();
      const base::Status st = Step(seqs);
      const double ms = Seconds(a, Clock::now()) * 1e3;
      AsCuda(backend_)->SetOpTiming(false);
      if (st.ok()) {
        std::printf(" per-op breakdown, B=%lld C=%lld (timed step %.2f ms):\n",
                    static_cast<long long>(batch), static_cast<long long>(context), ms);
        r["breakdown_step_ms"] = ms;
        r["breakdown"] = OpTable(AsCuda(backend_), ms);
      }
    }
    return r;
  }

  ordered_json Prefill(int64_t prompt, bool breakdown) {
    ordered_json r = {{"prompt", prompt}};
    const std::vector<int32_t> tokens = Tokens(prompt);
    {
      // One untimed prefill of the same length first: the first call of a shape grows the
      // backend's scratch buffers and sets up cuBLAS (a server pays that once, not per prompt).
      model::SequenceState warm = model_.NewSequence();
      model::ForwardBatch wb;
      wb.chunks.push_back({&warm, tokens, 0, false});
      auto out = model_.Forward(wb);
      if (!out.ok()) return Failed(r, out.status());
    }
    model::SequenceState s = model_.NewSequence();
    model::ForwardBatch b;
    b.chunks.push_back({&s, tokens, 0, false});
    auto* cuda = AsCuda(backend_);
    if (breakdown && cuda) cuda->SetOpTiming(true);
    const auto a = Clock::now();
    auto out = model_.Forward(b);
    const double secs = Seconds(a, Clock::now());
    if (!out.ok()) return Failed(r, out.status());
    const StepCost cost = PrefillCost(model_.config(), prompt);
    Fill(r, secs, cost);
    r["tokens_per_s"] = prompt / secs;
    std::printf("prefill P=%-6lld %8.2f s  %9.1f tok/s  %6.2f TFLOP/s (GEMM %.1f TFLOP)\n",
                static_cast<long long>(prompt), secs, prompt / secs, cost.flops() / secs / 1e12,
                cost.gemm_flops / 1e12);
    if (breakdown && cuda) {
      cuda->SetOpTiming(false);
      r["breakdown"] = OpTable(cuda, secs * 1e3);
      double gemm_us = 0;
      for (const auto& op : r["breakdown"]) {
        const std::string name = op["op"];
        if (name.rfind("Linear", 0) == 0 || name.rfind("RoutedExperts", 0) == 0) {
          gemm_us += op["total_us"].get<double>();
        }
      }
      r["gemm_s"] = gemm_us / 1e6;
      r["gemm_tflops"] = cost.gemm_flops / (gemm_us / 1e6) / 1e12;
      // The FP8 ceiling is the issue's yardstick; the BF16 one is what 32-value two-sided
      // block scales allow on Hopper (bench/gpu/RESULTS.md, session 6).
      const double tflops = r["gemm_tflops"].get<double>();
      if (ceil_.fp8_tflops > 0) r["gemm_of_fp8_ceiling"] = tflops / ceil_.fp8_tflops;
      if (ceil_.bf16_tflops > 0) r["gemm_of_bf16_ceiling"] = tflops / ceil_.bf16_tflops;
      std::printf("  GEMM part: %.3f s, %.1f TFLOP/s (%.1f%% of the FP8 ceiling, %.1f%% of BF16)\n",
                  gemm_us / 1e6, tflops,
                  ceil_.fp8_tflops > 0 ? 100 * tflops / ceil_.fp8_tflops : 0.0,
                  ceil_.bf16_tflops > 0 ? 100 * tflops / ceil_.bf16_tflops : 0.0);
    }
    return r;
  }

  double warmup_s() const { return warmup_s_; }

 private:
  std::vector<int32_t> Tokens(int64_t n) {
    std::uniform_int_distribution<int32_t> id(
        3, static_cast<int32_t>(model_.config().text().vocab_size) - 2);
    std::vector<int32_t> v(n);
    for (int32_t& x : v) x = id(rng_);
    return v;
  }

  // One decode step; *host_issue_s (if given) receives the host time spent issuing it.
  base::Status Step(std::vector<model::SequenceState>& seqs, double* host_issue_s = nullptr) {
    std::vector<std::vector<int32_t>> toks(seqs.size());
    model::ForwardBatch b;
    for (size_t i = 0; i < seqs.size(); ++i) {
      toks[i] = Tokens(1);
      b.chunks.push_back(
          {&seqs[i], toks[i], seqs[i].length, false,
           opt_.logits ? model::ChunkOutput::kLogits : model::ChunkOutput::kGreedyToken});
    }
    if (opt_.logits) {  // as the engine does: rows into reused page-locked memory
      b.logits_out = host_logits_.Reserve(static_cast<int64_t>(seqs.size()) *
                                          model_.config().text().vocab_size);
      b.logits_capacity = b.logits_out != nullptr ? host_logits_.capacity() : 0;
    }
    base::StatusOr<model::ForwardOutput> out = model_.Forward(b);
    if (!out.ok()) return out.status();
    if (host_issue_s != nullptr) *host_issue_s = out->host_issue_seconds;
    model_.Recycle(std::move(*out));  // as the engine does: no fresh 66 MB per step at B=128
    return base::Status::Ok();
  }

  // fp32 state of `batch` sequences of `context` tokens, twice (blocks + the per-step gather).
  double StateGiB(int64_t batch, int64_t context) const {
    auto floats = model_.StateBlockFloats(opt_.block_tokens);
    const double blocks = std::ceil(
        static_cast<double>(context + opt_.warmup_steps + opt_.steps + 2) / opt_.block_tokens);
    const double per_seq = 2 * blocks * (floats.ok() ? *floats : 0) * 4;
    return batch * per_seq / double(1 << 30);
  }

  void Fill(ordered_json& r, double secs, const StepCost& c) const {
    r["time_ms"] = secs * 1e3;
    r["weight_bytes"] = c.weight_bytes;
    r["expert_bytes"] = c.expert_bytes;
    r["state_bytes"] = c.state_bytes;
    r["gemm_flops"] = c.gemm_flops;
    r["attn_flops"] = c.attn_flops;
    r["achieved_GBps"] = c.bytes() / secs / 1e9;
    r["achieved_tflops"] = c.flops() / secs / 1e12;
    if (ceil_.hbm_GBps > 0) r["of_hbm_ceiling"] = c.bytes() / secs / 1e9 / ceil_.hbm_GBps;
  }

  ordered_json Failed(ordered_json& r, const base::Status& s) {
    r["error"] = s.ToString();
    std::printf("  failed: %s\n", s.ToString().c_str());
    return r;
  }

  const Options& opt_;
  model::Model& model_;
  model::Backend* backend_;
  Ceilings ceil_;
  std::mt19937 rng_;
  model::DeviceFloats values_;
  double warmup_s_ = 0;
  model::HostFloats host_logits_{backend_};  // --logits
};

Ceilings ReadCeilings(const std::string& path) {
  Ceilings c;
  if (path.empty()) return c;
  std::ifstream in(path);
  const auto j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    LOG_WARN("cannot read ceilings from {}", path);
    return c;
  }
  c.hbm_GBps = std::max(j.value("hbm_copy_GBps", 0.0), j.value("hbm_read_GBps", 0.0));
  c.fp8_tflops = j.value("fp8_tflops", 0.0);
  c.bf16_tflops = j.value("bf16_tflops", 0.0);
  return c;
}

int Run(const Options& opt) {
  const Ceilings ceil = ReadCeilings(opt.ceilings_json);
  const auto t0 = Clock::now();
  auto loaded = engine::LoadModelForEngine(opt.model_dir, opt.backend);
  if (!loaded.ok()) {
    std::fprintf(stderr, "gpu_model_bench: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  std::printf("loaded %s on %s in %.1f s\n", loaded->dir.c_str(), opt.backend.c_str(),
              Seconds(t0, Clock::now()));
  Bench bench(opt, *loaded, ceil);
  if (base::Status st = bench.Prepare(); !st.ok()) {
    std::fprintf(stderr, "gpu_model_bench: warm-up failed: %s\n", st.ToString().c_str());
    return 1;
  }
  ordered_json out = {
      {"model", loaded->dir},
      {"backend", opt.backend},
      {"fp8_activations", std::getenv("DEEPINFER_CUDA_FP8_ACT") != nullptr &&
                              std::string(std::getenv("DEEPINFER_CUDA_FP8_ACT")) != "0"},
      {"layers", loaded->model->config().text().num_hidden_layers},
      {"decode_output", opt.logits ? "logits rows" : "greedy tokens"},
      {"warmup_s", bench.warmup_s()},
      {"ceilings",
       {{"hbm_GBps", ceil.hbm_GBps},
        {"fp8_tflops", ceil.fp8_tflops},
        {"bf16_tflops", ceil.bf16_tflops}}}};
  out["decode"] = ordered_json::array();
  for (int64_t context : opt.contexts) {
    for (int64_t batch : opt.batches) {
      const std::string key = std::to_string(batch) + ":" + std::to_string(context);
      const bool breakdown =
          std::find(opt.breakdowns.begin(), opt.breakdowns.end(), key) != opt.breakdowns.end();
      out["decode"].push_back(bench.Decode(batch, context, breakdown));
      std::fflush(stdout);
    }
  }
  out["prefill"] = ordered_json::array();
  for (size_t i = 0; i < opt.prefills.size(); ++i) {
    const bool breakdown =
        opt.prefill_breakdowns.empty()
            ? i == 0
            : std::find(opt.prefill_breakdowns.begin(), opt.prefill_breakdowns.end(),
                        opt.prefills[i]) != opt.prefill_breakdowns.end();
    out["prefill"].push_back(bench.Prefill(opt.prefills[i], breakdown));
    std::fflush(stdout);
  }
  out["served_prefill"] = ordered_json::array();
  for (int64_t prompt : opt.served_prefills) {
    for (int64_t budget : opt.step_budgets) {
      out["served_prefill"].push_back(ServedPrefill(*loaded, prompt, budget));
      std::fflush(stdout);
    }
  }
  if (!opt.json_out.empty()) {
    std::ofstream(opt.json_out) << out.dump(2) << "\n";
    std::printf("wrote %s\n", opt.json_out.c_str());
  }
  return 0;
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  deepinfer::bench::Options opt;
  CLI::App app{"V4.1 decode/prefill benchmark on one GPU (bench/gpu/README.md)"};
  app.add_option("--model", opt.model_dir, "checkpoint directory")->required();
  app.add_option("--backend", opt.backend, "cuda | cuda:N | cpu");
  app.add_option("--batches", opt.batches, "decode batch sizes")->delimiter(',');
  app.add_option("--contexts", opt.contexts, "decode context lengths")->delimiter(',');
  app.add_option("--prefill", opt.prefills, "prefill prompt lengths")->delimiter(',');
  app.add_option("--breakdown", opt.breakdowns, "batch:context pairs with a per-op breakdown")
      ->delimiter(',');
  app.add_option("--prefill-breakdown", opt.prefill_breakdowns,
                 "prompt lengths with a per-op breakdown and the GEMM part (default: the first)")
      ->delimiter(',');
  app.add_option("--served-prefill", opt.served_prefills,
                 "prompt lengths prefilled through the engine (chunked by --step-budgets)")
      ->delimiter(',');
  app.add_option("--step-budgets", opt.step_budgets,
                 "the engine's tokens per step (chunked-prefill budget) for --served-prefill")
      ->delimiter(',');
  app.add_option("--steps", opt.steps, "timed decode steps per point (median)");
  app.add_option("--warmup-steps", opt.warmup_steps,
                 "untimed decode steps per point after the first (CUDA graph captures)");
  app.add_option("--block-tokens", opt.block_tokens, "state block size of the sequences");
  app.add_option("--state-budget-gib", opt.state_budget_gib, "skip grid points needing more");
  app.add_option("--ceilings", opt.ceilings_json, "gpu_ceilings JSON");
  app.add_option("--json", opt.json_out, "write the results here");
  app.add_flag("--logits", opt.logits,
               "decode steps copy logits rows to the host instead of greedy tokens");
  app.add_flag("--profile-step", opt.profile_step,
               "one extra decode step per point inside cudaProfilerStart/Stop");
  CLI11_PARSE(app, argc, argv);
  return deepinfer::bench::Run(opt);
}

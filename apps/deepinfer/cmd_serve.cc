// deepinfer serve [--model DIR] [--host 127.0.0.1] [--port 8000] [--api-key KEY]
//                 [--served-model-name NAME] [...]: the OpenAI + Anthropic compatible API
// server (src/server/README.md). Without --model it serves the demo model (random text).
// /health answers 503 while the model loads. SIGTERM / SIGINT: stop accepting, let in-flight
// requests finish for --shutdown-timeout seconds, cancel the rest, exit 0.
// Exit codes: 0 clean shutdown, 2 usage or startup error.
// deepinfer-cmd-requires: server recipe engine model backend_factory io tokenizer
#include <signal.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>

#include "base/logging.h"
#include "command.h"
#include "engine/engine.h"
#include "engine/model_engine.h"
#include "engine/model_runner_v41.h"
#include "kv/state_layout.h"
#include "model/demo_model.h"
#include "server/api_server.h"
#include "server/engine_service.h"
#include "server/protocol_endpoints.h"
#include "server/scripted_model_runner.h"
#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace {

namespace fs = std::filesystem;
using namespace deepinfer;  // NOLINT: CLI glue

int g_signal_pipe[2] = {-1, -1};

void OnShutdownSignal(int signal_number) {
  const auto byte = static_cast<unsigned char>(signal_number);
  [[maybe_unused]] const ssize_t n = ::write(g_signal_pipe[1], &byte, 1);
}

// Forwards to the real service once the model is loaded (the HTTP server starts first so that
// /health can report 503 while loading).
class LateBoundService final : public server::GenerationService {
 public:
  void Bind(server::GenerationService* service) { service_.store(service); }
  base::StatusOr<int64_t> Submit(server::GenerationRequest request,
                                 std::shared_ptr<server::GenerationSink> sink) override {
    auto* s = service_.load();
    if (s == nullptr) return base::UnavailableError("the model is loading");
    return s->Submit(std::move(request), std::move(sink));
  }
  void Cancel(int64_t id) override {
    if (auto* s = service_.load()) s->Cancel(id);
  }
  server::GenerationStats Stats() const override {
    auto* s = service_.load();
    return s ? s->Stats() : server::GenerationStats{};
  }
  int64_t context_length() const override {
    auto* s = service_.load();
    return s ? s->context_length() : 0;
  }

 private:
  std::atomic<server::GenerationService*> service_{nullptr};
};

struct ServeFlags {
  std::string model_dir;
  std::string backend = "cpu";  // backend::CreateBackend name: cpu, cuda, cuda:N
  backend::BackendOptions backend_options;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::string api_key;
  std::string served_model_name;
  std::string scripted_model;  // test-only
  int64_t max_model_len = 4096;
  int max_num_seqs = 256;
  int max_num_batched_tokens = 0;  // 0: engine::DefaultStepTokenBudget(backend)
  int num_blocks = 0;              // 0: enough for every sequence to reach max_model_len
  int max_running = 1024;
  int max_queued = 4096;
  int io_threads = 2;
  double shutdown_timeout = 30.0;
};

// Everything that must outlive the server, in destruction-safe order.
struct Runtime {
  engine::LoadedModel loaded;  // empty for the scripted model
  std::unique_ptr<engine::Engine> engine;
  std::unique_ptr<server::EngineGenerationService> service;
};

constexpr int kBlockTokens = 16;

// Tokens per engine step (chunked-prefill budget): the flag, else the backend's default; at
// least one per running sequence.
int StepTokenBudget(const ServeFlags& flags) {
  const int budget = flags.max_num_batched_tokens > 0
                         ? flags.max_num_batched_tokens
                         : engine::DefaultStepTokenBudget(flags.backend);
  return std::max(budget, flags.max_num_seqs);
}

// The engine over the checkpoint (engine/model_engine.h), or over the scripted test model.
base::Status LoadRuntime(const ServeFlags& flags, const fs::path& model_dir,
                         const tokenizer::Tokenizer& tokenizer, Runtime* runtime) {
  kv::StateLayout layout;
  if (!flags.scripted_model.empty()) {
    DI_ASSIGN_OR_RETURN(auto runner,
                        server::ScriptedModelRunner::FromFile(&tokenizer, flags.scripted_model));
    DI_ASSIGN_OR_RETURN(layout,
                        kv::MakePackedStateLayout(kv::V41FlashStateLayoutConfig(), kBlockTokens));
    engine::EngineConfig config;
    config.layout = layout;
    config.num_slots = flags.max_num_seqs;
    config.num_blocks = flags.num_blocks > 0 ? flags.num_blocks : 4096;
    config.scheduler.max_tokens_per_step = StepTokenBudget(flags);
    config.scheduler.max_model_len = flags.max_model_len;
    config.scheduler.eos_token_ids = {server::EosTokenId(tokenizer)};
    DI_ASSIGN_OR_RETURN(runtime->engine, engine::Engine::Create(config, std::move(runner)));
  } else {
    DI_ASSIGN_OR_RETURN(
        runtime->loaded,
        engine::LoadModelForEngine(model_dir.string(), flags.backend, flags.backend_options));
    engine::ModelEngineOptions options;
    options.num_slots = flags.max_num_seqs;
    options.max_tokens_per_step = StepTokenBudget(flags);
    options.max_model_len = flags.max_model_len;
    options.block_tokens = kBlockTokens;
    options.num_blocks = flags.num_blocks;
    DI_ASSIGN_OR_RETURN(runtime->engine, engine::MakeModelEngine(runtime->loaded, options));
    DI_ASSIGN_OR_RETURN(layout,
                        engine::StateLayoutForModel(runtime->loaded.model->config(), kBlockTokens));
  }
  runtime->service = std::make_unique<server::EngineGenerationService>(
      runtime->engine.get(),
      server::EngineServiceOptions{flags.max_model_len, layout.BlockBytes()});
  return base::Status::Ok();
}

std::string DefaultServedName(const ServeFlags& flags) {
  if (!flags.served_model_name.empty()) return flags.served_model_name;
  if (flags.model_dir.empty()) return server::kDefaultServedModelName;
  fs::path dir = fs::path(flags.model_dir);
  if (!dir.has_filename()) dir = dir.parent_path();
  return dir.filename().string();
}

int Fail(const std::string& message) {
  std::fprintf(stderr, "deepinfer serve: %s\n", message.c_str());
  return 2;
}

int RunServe(int argc, char** argv) {
  CLI::App app{"Serve the OpenAI + Anthropic compatible HTTP API", argv[0]};
  ServeFlags flags;
  app.add_option("--model", flags.model_dir, "checkpoint directory (default: the demo model)");
  app.add_option("--backend", flags.backend, "compute backend: cpu, cuda or cuda:N (default cpu)");
  app.add_flag("--batch-invariant", flags.backend_options.batch_invariant,
               "bitwise batch-invariant results (cuda: no kernel chosen by batch size)");
  app.add_flag("--fp8-activations", flags.backend_options.fp8_activations,
               "cuda: quantise GEMM activations to FP8 like DeepSeek's kernels (faster prefill; "
               "deviates slightly from the reference)");
  app.add_option("--fp8-expert-copy-gib", flags.backend_options.fp8_expert_copy_gib,
                 "cuda with --fp8-activations: GiB of FP8 copies of the MXFP4 experts kept for "
                 "prefill (FP8 tensor-core expert GEMMs; twice the expert bytes again; for "
                 "prefill servers)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--host", flags.host, "address to listen on")->capture_default_str();
  app.add_option("--port", flags.port, "port to listen on (0: any free port)")
      ->capture_default_str();
  app.add_option("--api-key", flags.api_key,
                 "require 'Authorization: Bearer KEY' or 'x-api-key: KEY' (all but /health)");
  app.add_option("--served-model-name", flags.served_model_name,
                 "model name clients use (default: deepseek-ai/DeepSeek-V4.1-Flash-1017, or "
                 "the --model directory name)");
  app.add_option("--max-model-len", flags.max_model_len, "prompt + output tokens per request")
      ->capture_default_str();
  app.add_option("--max-num-seqs", flags.max_num_seqs, "sequences batched by the engine")
      ->capture_default_str();
  app.add_option("--max-num-batched-tokens", flags.max_num_batched_tokens,
                 "tokens per engine step, prompt chunks included (chunked prefill; 0: 8192 on "
                 "cuda, 512 on cpu; at least --max-num-seqs)")
      ->capture_default_str();
  app.add_option("--num-blocks", flags.num_blocks,
                 "state-memory blocks of 16 tokens (0: enough for every sequence)")
      ->capture_default_str();
  app.add_option("--max-running-requests", flags.max_running,
                 "requests admitted at once; more wait in the queue")
      ->capture_default_str();
  app.add_option("--max-queued-requests", flags.max_queued, "queue bound; beyond it: 429")
      ->capture_default_str();
  app.add_option("--io-threads", flags.io_threads, "HTTP I/O threads")->capture_default_str();
  app.add_option("--shutdown-timeout", flags.shutdown_timeout,
                 "seconds in-flight requests may take after SIGTERM")
      ->capture_default_str();
  // Test-only: replace the model by a script (server/scripted_model_runner.h). Hidden.
  app.add_option("--scripted-model", flags.scripted_model)->group("");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (flags.port < 0 || flags.port > 65535) return Fail("--port must be in [0, 65535]");
  if (flags.max_num_batched_tokens < 0) return Fail("--max-num-batched-tokens must be >= 0");

  // SIGTERM / SIGINT -> a byte on a pipe the main thread waits on. A handler (not sigwait with
  // blocked signals) because libraries may have started threads before main (OpenBLAS does),
  // and those would not have the signals blocked.
  if (::pipe(g_signal_pipe) != 0) return Fail("cannot create the signal pipe");
  struct sigaction action {};
  action.sa_handler = OnShutdownSignal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);

  fs::path model_dir = flags.model_dir;
  if (flags.model_dir.empty() && flags.scripted_model.empty()) {
    auto demo = model::EnsureDemoModel();
    if (!demo.ok()) return Fail(demo.status().ToString());
    model_dir = *demo;
  }
  const fs::path local_tokenizer = model_dir / "tokenizer.json";
  auto tokenizer = tokenizer::Tokenizer::FromFile(!model_dir.empty() && fs::exists(local_tokenizer)
                                                      ? local_tokenizer.string()
                                                      : tokenizer::DefaultTokenizerPath());
  if (!tokenizer.ok()) return Fail(tokenizer.status().ToString());

  LateBoundService late;
  server::ApiServerOptions options;
  options.http.host = flags.host;
  options.http.port = static_cast<uint16_t>(flags.port);
  options.http.io_threads = flags.io_threads;
  options.api_key = flags.api_key;
  options.served_model_name = DefaultServedName(flags);
  options.max_running_requests = flags.max_running;
  options.max_queued_requests = flags.max_queued;
  server::ApiServer api(options, &late, tokenizer->get());
  server::RegisterProtocolEndpoints(api);
  if (const base::Status status = api.Start(); !status.ok()) return Fail(status.ToString());
  std::fprintf(stderr, "deepinfer serve: listening on http://%s:%u (model '%s'), loading...\n",
               flags.host.c_str(), api.port(), options.served_model_name.c_str());

  Runtime runtime;
  if (const base::Status status = LoadRuntime(flags, model_dir, **tokenizer, &runtime);
      !status.ok()) {
    api.Shutdown(std::chrono::milliseconds(0));
    return Fail(status.ToString());
  }
  late.Bind(runtime.service.get());
  api.SetReady(true);
  std::fprintf(stderr, "deepinfer serve: ready on http://%s:%u\n", flags.host.c_str(), api.port());

  unsigned char signal_number = 0;
  while (::read(g_signal_pipe[0], &signal_number, 1) != 1) {
    // EINTR: the handler ran in this thread; the byte is still coming.
  }
  std::fprintf(stderr, "deepinfer serve: signal %d, shutting down\n", signal_number);
  const bool clean =
      api.Shutdown(std::chrono::milliseconds(static_cast<int64_t>(flags.shutdown_timeout * 1000)));
  late.Bind(nullptr);
  std::fprintf(stderr, "deepinfer serve: stopped (%s)\n",
               clean ? "all requests finished" : "unfinished requests were cancelled");
  return 0;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND(serve, "serve the OpenAI + Anthropic compatible HTTP API", RunServe);

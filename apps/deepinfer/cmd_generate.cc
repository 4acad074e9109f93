// `deepinfer generate`: offline batched generation through the Engine (V4.1 on the CPU).
// deepinfer-cmd-requires: engine model backend_factory tokenizer recipe
//
//   deepinfer generate [--model DIR] [--prompt TEXT | --prompts-file FILE] [--chat]
//                      [--max-tokens N] [--temperature T] [--top-p P] [--seed S] [--json]
// Without --model the embedded demo model is used. A prompts file has one JSON request per
// line with one of "prompt" (text), "messages" (chat, rendered by the recipe) or
// "prompt_token_ids", and optional "max_tokens", "temperature", "top_p", "top_k", "seed",
// "n", "stop" (string or list of strings); all lines are submitted together and run batched.
// Plain-text prompts get BOS prepended; --chat renders --prompt / "prompt" as one user
// message. Defaults: greedy (temperature 0), 16 tokens.
// --json prints one object per request, in input order:
//   {"index", "token_ids", "text", "finish_reason"[, "samples": [...] when n > 1]}
// or {"index", "error"} for a bad line (exit status 2 at the end).
#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "command.h"
#include "engine/chat_prompt.h"
#include "engine/model_engine.h"

namespace {

using deepinfer::engine::EngineResult;
using deepinfer::engine::FinishReasonName;
using deepinfer::engine::Request;
using deepinfer::engine::SampleResult;
using deepinfer::engine::TokenId;
using deepinfer::tokenizer::Tokenizer;
using Json = nlohmann::ordered_json;

struct Defaults {
  int max_tokens = 16;
  float temperature = 0.0f;
  float top_p = 1.0f;
  std::optional<uint64_t> seed;
  bool chat = false;
};

struct Job {
  std::optional<Request> request;
  std::vector<std::string> stop;  // stop strings
  std::string error;
};

const Tokenizer& Need(const Tokenizer* tok) {
  if (tok == nullptr) {
    throw std::invalid_argument("this model has no usable tokenizer: use \"prompt_token_ids\"");
  }
  return *tok;
}

std::vector<TokenId> EncodeChat(const Tokenizer& tok, const Json& messages) {
  auto ids = deepinfer::engine::EncodeChatMessages(tok, messages);
  if (!ids.ok()) throw std::invalid_argument(ids.status().message());
  return std::move(ids).value();
}

// One request object -> a Job. Throws std::exception on bad input (caught by the caller).
Job ParseRequest(const Json& j, const Defaults& d, const Tokenizer* tok, TokenId bos) {
  if (!j.is_object()) throw std::invalid_argument("expected a JSON object");
  const int kinds = j.contains("prompt") + j.contains("messages") + j.contains("prompt_token_ids");
  if (kinds != 1) {
    throw std::invalid_argument(
        "need exactly one of \"prompt\", \"messages\", \"prompt_token_ids\"");
  }
  Request r;
  if (j.contains("prompt")) {
    const std::string text = j.at("prompt").get<std::string>();
    if (d.chat) {
      r.prompt = EncodeChat(Need(tok), Json::array({Json{{"role", "user"}, {"content", text}}}));
    } else {
      r.prompt = Need(tok).Encode(text);
      r.prompt.insert(r.prompt.begin(), bos);
    }
  } else if (j.contains("messages")) {
    r.prompt = EncodeChat(Need(tok), j.at("messages"));
  } else {
    r.prompt = j.at("prompt_token_ids").get<std::vector<TokenId>>();
  }
  r.params.max_tokens = j.value("max_tokens", d.max_tokens);
  r.params.temperature = j.value("temperature", d.temperature);
  r.params.top_p = j.value("top_p", d.top_p);
  r.params.top_k = j.value("top_k", 0);
  r.params.n = j.value("n", 1);
  if (j.contains("seed")) {
    r.params.seed = j.at("seed").get<uint64_t>();
  } else {
    r.params.seed = d.seed;
  }
  Job job;
  if (j.contains("stop")) {
    const Json& s = j.at("stop");
    job.stop = s.is_string() ? std::vector<std::string>{s.get<std::string>()}
                             : s.get<std::vector<std::string>>();
  }
  if (!job.stop.empty()) {
    const std::vector<std::string> stops = job.stop;
    const Tokenizer& t = Need(tok);
    r.stop_hook = [&t, stops](std::span<const TokenId> out) {
      auto text = t.Decode(out, /*skip_special_tokens=*/true);
      if (!text.ok()) return false;
      for (const std::string& s : stops) {
        if (!s.empty() && text->find(s) != std::string::npos) return true;
      }
      return false;
    };
  }
  job.request = std::move(r);
  return job;
}

// The sample's text (special tokens skipped), cut before the first stop string.
std::string SampleText(const Tokenizer* tok, const SampleResult& s,
                       const std::vector<std::string>& stop) {
  if (tok == nullptr) return "";
  std::string text = tok->Decode(s.tokens, true).value_or("");
  size_t cut = std::string::npos;
  for (const std::string& st : stop) {
    if (!st.empty()) cut = std::min(cut, text.find(st));
  }
  if (cut != std::string::npos) text.resize(cut);
  return text;
}

Json SampleJson(const Tokenizer* tok, const SampleResult& s, const std::vector<std::string>& stop) {
  return Json{{"token_ids", s.tokens},
              {"text", SampleText(tok, s, stop)},
              {"finish_reason", std::string(FinishReasonName(s.finish_reason))}};
}

int RunGenerate(int argc, char** argv) {
  CLI::App app("Generate text with the V4.1 engine (batched, CPU).");
  std::string model_dir, prompt, prompts_file;
  Defaults d;
  uint64_t seed = 0;
  bool json_out = false;
  int max_batch = 16;
  int max_num_batched_tokens = 0;  // 0: engine::DefaultStepTokenBudget(backend_name)
  std::string backend_name = "cpu";
  deepinfer::backend::BackendOptions backend_options;
  app.add_option("--model", model_dir, "checkpoint directory (default: embedded demo model)");
  auto* prompt_opt = app.add_option("--prompt", prompt, "prompt text");
  app.add_option("--prompts-file", prompts_file, "JSONL file, one request per line")
      ->excludes(prompt_opt);
  app.add_flag("--chat", d.chat, "render --prompt / \"prompt\" as a chat user message");
  app.add_option("--max-tokens", d.max_tokens, "tokens to generate per sample (default 16)");
  app.add_option("--temperature", d.temperature, "0 = greedy (default)");
  app.add_option("--top-p", d.top_p, "nucleus sampling mass (default 1)");
  auto* seed_opt = app.add_option("--seed", seed, "sampling seed");
  app.add_option("--max-batch", max_batch, "max concurrently running sequences (default 16)");
  app.add_option("--max-num-batched-tokens", max_num_batched_tokens,
                 "tokens per engine step, prompt chunks included (0: 8192 on cuda, 512 on cpu)");
  app.add_flag("--json", json_out, "one JSON object per request on stdout");
  app.add_option("--backend", backend_name, "compute backend: cpu, cuda or cuda:N (default cpu)");
  app.add_flag("--batch-invariant", backend_options.batch_invariant,
               "bitwise batch-invariant results (cuda: no kernel chosen by batch size)");
  app.add_flag("--fp8-activations", backend_options.fp8_activations,
               "cuda: quantise GEMM activations to FP8 like DeepSeek's kernels");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (prompt.empty() && prompts_file.empty()) {
    std::fprintf(stderr, "error: give --prompt or --prompts-file\n");
    return 2;
  }
  if (max_num_batched_tokens < 0) {
    std::fprintf(stderr, "error: --max-num-batched-tokens must be >= 0\n");
    return 2;
  }
  if (*seed_opt) d.seed = seed;

  auto loaded = deepinfer::engine::LoadModelForEngine(model_dir, backend_name, backend_options);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
    return 2;
  }
  const Tokenizer* tok = loaded->tokenizer.get();  // may be null: ids only
  const TokenId bos = static_cast<TokenId>(loaded->model->config().bos_token_id);

  std::vector<Json> inputs;
  if (!prompt.empty()) {
    inputs.push_back(Json{{"prompt", prompt}});
  } else {
    std::ifstream in(prompts_file);
    if (!in) {
      std::fprintf(stderr, "error: cannot read %s\n", prompts_file.c_str());
      return 2;
    }
    std::string line;
    while (std::getline(in, line)) {
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      try {
        inputs.push_back(Json::parse(line));
      } catch (const std::exception& e) {
        inputs.push_back(Json{{"__error", std::string("invalid JSON: ") + e.what()}});
      }
    }
  }
  std::vector<Job> jobs;
  for (const Json& j : inputs) {
    try {
      if (j.contains("__error")) throw std::invalid_argument(j["__error"].get<std::string>());
      jobs.push_back(ParseRequest(j, d, tok, bos));
    } catch (const std::exception& e) {
      jobs.push_back(Job{std::nullopt, {}, e.what()});
    }
  }

  deepinfer::engine::ModelEngineOptions options;
  options.num_slots = max_batch;
  options.max_tokens_per_step = max_num_batched_tokens > 0
                                    ? max_num_batched_tokens
                                    : deepinfer::engine::DefaultStepTokenBudget(backend_name);
  auto engine = deepinfer::engine::MakeModelEngine(*loaded, options);
  if (!engine.ok()) {
    std::fprintf(stderr, "error: %s\n", engine.status().ToString().c_str());
    return 2;
  }
  std::vector<std::future<EngineResult>> futures(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    if (jobs[i].request) futures[i] = (*engine)->Submit(*jobs[i].request).result;
  }
  bool failed = false;
  for (size_t i = 0; i < jobs.size(); ++i) {
    Json out{{"index", i}};
    std::string error = jobs[i].error;
    std::optional<EngineResult> r;
    if (error.empty()) {
      r = futures[i].get();
      if (!r->result.status.ok()) error = r->result.status.ToString();
    }
    if (!error.empty()) {
      failed = true;
      out["error"] = error;
      if (json_out) {
        std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
      } else {
        std::fprintf(stderr, "request %zu: error: %s\n", i, error.c_str());
      }
      continue;
    }
    const auto& samples = r->result.samples;
    if (json_out) {
      Json first = SampleJson(tok, samples[0], jobs[i].stop);
      for (auto& [k, v] : first.items()) out[k] = v;
      if (samples.size() > 1) {
        out["samples"] = Json::array();
        for (const SampleResult& s : samples)
          out["samples"].push_back(SampleJson(tok, s, jobs[i].stop));
      }
      std::printf("%s\n", out.dump(-1, ' ', false, Json::error_handler_t::replace).c_str());
    } else {
      for (const SampleResult& s : samples) {
        std::printf("%s\n", SampleText(tok, s, jobs[i].stop).c_str());
        if (samples.size() > 1 || jobs.size() > 1) std::printf("---\n");
      }
    }
  }
  std::fflush(stdout);
  return failed ? 2 : 0;
}

}  // namespace

DEEPINFER_REGISTER_COMMAND(generate, "generate text with the engine (batched, CPU)", RunGenerate);

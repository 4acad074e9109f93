// Offline batched inference with the C++ Engine API (the counterpart of DeepInfer's
// offline_inference example).
//
//   offline_inference [--model DIR]
// The model is --model, else $DEEPINFER_HF_MODEL_DIR, else the embedded demo model (random
// weights: the text is meaningless, the pipeline is real).
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/model_engine.h"

using namespace deepinfer;

int main(int argc, char** argv) {
  std::string model_dir;
  if (const char* env = std::getenv("DEEPINFER_HF_MODEL_DIR")) model_dir = env;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--model") model_dir = argv[i + 1];
  }

  // Load the checkpoint (or the demo model) and build an engine over it.
  auto loaded = engine::LoadModelForEngine(model_dir);
  if (!loaded.ok()) {
    std::fprintf(stderr, "error: %s\n", loaded.status().ToString().c_str());
    return 1;
  }
  auto eng = engine::MakeModelEngine(*loaded, engine::ModelEngineOptions{});
  if (!eng.ok()) {
    std::fprintf(stderr, "error: %s\n", eng.status().ToString().c_str());
    return 1;
  }

  const std::vector<std::string> prompts = {
      "Hello, my name is",
      "The president of the United States is",
      "The capital of France is",
      "The future of AI is",
  };
  engine::SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.95f;
  params.max_tokens = 16;
  params.seed = 0;

  std::vector<engine::Request> requests;
  for (const std::string& p : prompts) {
    engine::Request r;
    r.prompt = loaded->tokenizer->Encode(p);
    r.prompt.insert(r.prompt.begin(),
                    static_cast<engine::TokenId>(loaded->model->config().bos_token_id));
    r.params = params;
    requests.push_back(std::move(r));
  }

  // All requests run batched; results come back in input order.
  const std::vector<engine::EngineResult> results = (*eng)->Generate(requests);
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& sample = results[i].result.samples.at(0);
    const std::string text = loaded->tokenizer->Decode(sample.tokens, true).value_or("");
    std::printf("Prompt: \"%s\", Generated text: \"%s\" (TTFT %.3f s)\n", prompts[i].c_str(),
                text.c_str(), results[i].timings.TtftSeconds());
  }
  return 0;
}

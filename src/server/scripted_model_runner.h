// TEST-ONLY ModelRunner ("scripted model"): instead of running a network it emits a chosen
// text, so the real engine, recipe parser, HTTP and SSE layers can be driven end to end with
// outputs that exercise reasoning, tool calls, JSON mode and stop sequences.
//
// Script file (JSON):
//   {"rules": [{"match": "weather", "output": "Let me check.</think>\n\n<｜DSML｜ calls>..."},
//              ...],
//    "default": "Hello from the scripted model.",
//    "step_delay_ms": 0}            (optional: sleep per step, to simulate a slow model)
// For each request the runner decodes the prompt and takes the LAST rule whose `match` occurs
// in the text after the prompt's last "<｜User｜>" marker — the newest user turn (or
// `default`). The output is tokenized with special-token recognition (so "</think>" and
// "<｜DSML｜" become the model's special tokens); token i of it is emitted at output position i,
// then EOS forever. Sampling parameters are ignored.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/statusor.h"
#include "engine/model_runner.h"

namespace deepinfer::tokenizer {
class Tokenizer;
}

namespace deepinfer::server {

struct ScriptRule {
  std::string match;
  std::string output;
};

class ScriptedModelRunner final : public engine::ModelRunner {
 public:
  // `tokenizer` must outlive the runner.
  ScriptedModelRunner(const tokenizer::Tokenizer* tokenizer, std::vector<ScriptRule> rules,
                      std::string default_output, int step_delay_ms = 0);
  // Reads a script file (format above). Errors name the file and the field.
  static base::StatusOr<std::unique_ptr<ScriptedModelRunner>> FromFile(
      const tokenizer::Tokenizer* tokenizer, const std::string& path);

  int vocab_size() const override;
  base::StatusOr<engine::StepOutput> Execute(const engine::StepPlan& plan) override;

 private:
  const std::vector<engine::TokenId>& ScriptFor(engine::RequestId request,
                                                std::span<const engine::TokenId> prompt);

  const tokenizer::Tokenizer* tokenizer_;
  std::vector<ScriptRule> rules_;
  std::string default_output_;
  int32_t eos_ = 1;
  int step_delay_ms_ = 0;
  std::map<engine::RequestId, std::vector<engine::TokenId>> scripts_;  // engine thread only
};

}  // namespace deepinfer::server

#include "server/scripted_model_runner.h"

#include <fmt/format.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "server/text_stream.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::server {

ScriptedModelRunner::ScriptedModelRunner(const tokenizer::Tokenizer* tokenizer,
                                         std::vector<ScriptRule> rules, std::string default_output,
                                         int step_delay_ms)
    : tokenizer_(tokenizer),
      rules_(std::move(rules)),
      default_output_(std::move(default_output)),
      eos_(EosTokenId(*tokenizer)),
      step_delay_ms_(step_delay_ms) {}

base::StatusOr<std::unique_ptr<ScriptedModelRunner>> ScriptedModelRunner::FromFile(
    const tokenizer::Tokenizer* tokenizer, const std::string& path) {
  std::ifstream file(path);
  if (!file) return base::NotFoundError(fmt::format("cannot open script file {}", path));
  std::stringstream text;
  text << file.rdbuf();
  const nlohmann::json json = nlohmann::json::parse(text.str(), nullptr, false);
  if (json.is_discarded() || !json.is_object()) {
    return base::InvalidArgumentError(fmt::format("{}: not a JSON object", path));
  }
  std::vector<ScriptRule> rules;
  if (const auto it = json.find("rules"); it != json.end()) {
    if (!it->is_array()) return base::InvalidArgumentError(fmt::format("{}: rules", path));
    for (size_t i = 0; i < it->size(); ++i) {
      const nlohmann::json& rule = (*it)[i];
      if (!rule.is_object() || !rule.value("match", nlohmann::json()).is_string() ||
          !rule.value("output", nlohmann::json()).is_string()) {
        return base::InvalidArgumentError(
            fmt::format("{}: rules[{}] needs string fields match and output", path, i));
      }
      rules.push_back({rule["match"].get<std::string>(), rule["output"].get<std::string>()});
    }
  }
  const auto fallback = json.value("default", nlohmann::json("Hello from the scripted model."));
  if (!fallback.is_string()) return base::InvalidArgumentError(fmt::format("{}: default", path));
  const auto delay = json.value("step_delay_ms", nlohmann::json(0));
  if (!delay.is_number_integer() || delay.get<int>() < 0) {
    return base::InvalidArgumentError(fmt::format("{}: step_delay_ms", path));
  }
  return std::make_unique<ScriptedModelRunner>(tokenizer, std::move(rules),
                                               fallback.get<std::string>(), delay.get<int>());
}

int ScriptedModelRunner::vocab_size() const { return tokenizer_->vocab_size(); }

const std::vector<engine::TokenId>& ScriptedModelRunner::ScriptFor(
    engine::RequestId request, std::span<const engine::TokenId> prompt) {
  if (const auto it = scripts_.find(request); it != scripts_.end()) return it->second;
  // Bounded cache: requests are short-lived, old entries are dropped wholesale.
  if (scripts_.size() > 4096) scripts_.clear();
  std::string text = tokenizer_->Decode(prompt).value_or("");
  if (const size_t user = text.rfind("<｜User｜>"); user != std::string::npos) {
    text.erase(0, user);
  }
  const std::string* output = &default_output_;
  for (const ScriptRule& rule : rules_) {
    if (text.find(rule.match) != std::string::npos) output = &rule.output;
  }
  return scripts_[request] = tokenizer_->Encode(*output, /*match_special_tokens=*/true);
}

base::StatusOr<engine::StepOutput> ScriptedModelRunner::Execute(const engine::StepPlan& plan) {
  if (step_delay_ms_ > 0) std::this_thread::sleep_for(std::chrono::milliseconds(step_delay_ms_));
  engine::StepOutput out;
  for (const engine::ScheduledChunk& chunk : plan.chunks) {
    for (const engine::SampleTarget& target : chunk.samples) {
      const auto& script = ScriptFor(chunk.request_id, chunk.prompt);
      const size_t index = chunk.output.size();
      engine::SampledToken sampled;
      sampled.seq_id = target.seq_id;
      sampled.token = index < script.size() ? script[index] : eos_;
      out.tokens.push_back(std::move(sampled));
    }
  }
  return out;
}

}  // namespace deepinfer::server

#include "recipe/stream_processor.h"

#include <chrono>

namespace deepinfer::recipe {

GeneratorOptions GeneratorOptionsFor(const ConvertedRequest& request, std::string response_id,
                                     std::string model, int64_t created) {
  GeneratorOptions options;
  options.response_id = std::move(response_id);
  options.model = std::move(model);
  options.created = created;
  options.thinking_mode = request.conversation.thinking_mode;
  options.include_usage = request.include_usage;
  options.custom_tool_names = request.custom_tool_names;
  return options;
}

StreamProcessor::StreamProcessor(const ConvertedRequest& request, StreamProcessorOptions options)
    : protocol_(request.protocol), parser_(request.parsing_options, std::move(options.decoder)) {
  int64_t created = options.created;
  if (created == 0) {
    created = std::chrono::duration_cast<std::chrono::seconds>(
                  std::chrono::system_clock::now().time_since_epoch())
                  .count();
  }
  GeneratorOptions generator_options =
      GeneratorOptionsFor(request, options.response_id, options.model, created);
  generator_options.completed_at = options.completed_at;
  generator_ = MakeEventGenerator(protocol_, generator_options);
  if (options.accumulate.value_or(!request.stream)) {
    accumulator_ = MakeAccumulator(protocol_, generator_options);
  }
}

StreamProcessor::~StreamProcessor() = default;

void StreamProcessor::Dispatch() {
  for (const OutputChunk& chunk : chunks_) {
    const size_t first = events_.size();
    generator_->Generate(chunk, &events_);
    if (accumulator_) {
      for (size_t i = first; i < events_.size(); ++i) accumulator_->Append(events_[i]);
    }
  }
  chunks_.clear();
}

void StreamProcessor::OnReady(std::optional<std::string> system_fingerprint, PromptUsage usage) {
  parser_.Ready(std::move(system_fingerprint), usage, &chunks_);
  Dispatch();
}

void StreamProcessor::OnText(std::string_view text, int64_t tokens) {
  parser_.Text(text, tokens, &chunks_);
  Dispatch();
}

base::Status StreamProcessor::OnToken(int32_t token_id) {
  base::Status status = parser_.Token(token_id, &chunks_);
  Dispatch();
  return status;
}

void StreamProcessor::OnFinish(BackendFinish reason) {
  parser_.Finish(reason, &chunks_);
  Dispatch();
}

void StreamProcessor::OnEnd() {
  parser_.End(&chunks_);
  Dispatch();
}

std::vector<Json> StreamProcessor::TakeEvents() {
  std::vector<Json> out;
  out.swap(events_);
  return out;
}

Json StreamProcessor::FinalResponse() const {
  return accumulator_ ? accumulator_->Result() : Json(nullptr);
}

}  // namespace deepinfer::recipe

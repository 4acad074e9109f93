// Anthropic Messages streaming events and the message accumulator (spec §4.3).
#include "recipe/stream_events.h"

namespace deepinfer::recipe {
namespace {

Json MessagesUsage(const PromptUsage& prompt, int64_t output_tokens) {
  Json usage = Json::object();
  usage["input_tokens"] =
      std::max<int64_t>(0, prompt.prompt_tokens - prompt.prompt_cache_hit_tokens);
  usage["cache_creation_input_tokens"] = 0;
  usage["cache_read_input_tokens"] = prompt.prompt_cache_hit_tokens;
  usage["output_tokens"] = output_tokens;
  usage["service_tier"] = "standard";
  return usage;
}

const char* StopReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength:
      return "max_tokens";
    case FinishReason::kStopSequence:
      return "stop_sequence";
    case FinishReason::kToolCalls:
      return "tool_use";
    case FinishReason::kContentFilter:
      return "refusal";
    default:
      return "end_turn";
  }
}

Json MessageObject(const GeneratorOptions& options, const PromptUsage& usage) {
  Json message = Json::object();
  message["id"] = options.response_id;
  message["type"] = "message";
  message["role"] = "assistant";
  message["model"] = options.model;
  message["content"] = Json::array();
  message["stop_reason"] = nullptr;
  message["stop_sequence"] = nullptr;
  message["usage"] = MessagesUsage(usage, 0);
  return message;
}

class MessagesGenerator : public EventGenerator {
 public:
  explicit MessagesGenerator(const GeneratorOptions& options)
      : options_(options),
        signature_(options.signature.empty() ? options.response_id : options.signature) {}

  void Generate(const OutputChunk& chunk, std::vector<Json>* events) override {
    if (finished_) return;
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart:
        if (started_) return;
        started_ = true;
        prompt_usage_ = chunk.prompt_usage;
        events->push_back(
            Json{{"type", "message_start"}, {"message", MessageObject(options_, prompt_usage_)}});
        if (options_.thinking_mode) OpenBlock(Block::kThinking, ThinkingBlock(), events);
        return;
      case OutputChunk::Kind::kRaw:
        if (active_ != Block::kText)
          OpenBlock(Block::kText, Json{{"type", "text"}, {"text", ""}}, events);
        events->push_back(Delta(Json{{"type", "text_delta"}, {"text", chunk.text}}));
        return;
      case OutputChunk::Kind::kReasoning:
        if (active_ != Block::kThinking) OpenBlock(Block::kThinking, ThinkingBlock(), events);
        events->push_back(Delta(Json{{"type", "thinking_delta"}, {"thinking", chunk.text}}));
        return;
      case OutputChunk::Kind::kToolCall: {
        Json block = Json::object();
        block["type"] = "tool_use";
        block["id"] = "toolu_" + options_.response_id + "_" + std::to_string(tool_calls_++);
        block["name"] = chunk.text;
        block["input"] = Json::object();
        OpenBlock(Block::kToolUse, std::move(block), events);
        return;
      }
      case OutputChunk::Kind::kArgumentsDelta:
        if (active_ == Block::kToolUse) {
          events->push_back(
              Delta(Json{{"type", "input_json_delta"}, {"partial_json", chunk.text}}));
        }
        return;
      case OutputChunk::Kind::kFinish: {
        CloseBlock(events);
        Json delta = Json::object();
        delta["stop_reason"] = StopReason(chunk.finish_reason);
        delta["stop_sequence"] = chunk.stop_sequence ? Json(*chunk.stop_sequence) : Json(nullptr);
        Json event = Json::object();
        event["type"] = "message_delta";
        event["delta"] = std::move(delta);
        event["usage"] = MessagesUsage(prompt_usage_, chunk.completion_tokens);
        events->push_back(std::move(event));
        events->push_back(Json{{"type", "message_stop"}});
        finished_ = true;
        return;
      }
      case OutputChunk::Kind::kToolCallBegin:
        return;
    }
  }

 private:
  enum class Block { kNone, kText, kThinking, kToolUse };

  static Json ThinkingBlock() {
    return Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}};
  }

  Json Delta(Json delta) const {
    Json event = Json::object();
    event["type"] = "content_block_delta";
    event["index"] = index_;
    event["delta"] = std::move(delta);
    return event;
  }

  void CloseBlock(std::vector<Json>* events) {
    if (active_ == Block::kNone) return;
    if (active_ == Block::kThinking) {
      events->push_back(Delta(Json{{"type", "signature_delta"}, {"signature", signature_}}));
    }
    events->push_back(Json{{"type", "content_block_stop"}, {"index", index_}});
    active_ = Block::kNone;
    ++index_;
  }

  void OpenBlock(Block kind, Json block, std::vector<Json>* events) {
    CloseBlock(events);
    Json event = Json::object();
    event["type"] = "content_block_start";
    event["index"] = index_;
    event["content_block"] = std::move(block);
    events->push_back(std::move(event));
    if (index_ == 0) events->push_back(Json{{"type", "ping"}});
    active_ = kind;
  }

  GeneratorOptions options_;
  std::string signature_;
  PromptUsage prompt_usage_;
  Block active_ = Block::kNone;
  int64_t index_ = 0;
  int64_t tool_calls_ = 0;
  bool started_ = false;
  bool finished_ = false;
};

class MessagesAccumulator : public ResponseAccumulator {
 public:
  explicit MessagesAccumulator(const GeneratorOptions& options)
      : message_(MessageObject(options, PromptUsage{})) {}

  void Append(const Json& event) override {
    if (!event.is_object()) return;
    const std::string type = event.value("type", "");
    if (type == "message_start") {
      message_ = event["message"];
      partial_inputs_.clear();
    } else if (type == "content_block_start") {
      if (event["index"] == message_["content"].size()) {
        message_["content"].push_back(event["content_block"]);
        partial_inputs_.emplace_back();
      }
    } else if (type == "content_block_delta") {
      AppendDelta(event["index"].get<size_t>(), event["delta"]);
    } else if (type == "content_block_stop") {
      const size_t index = event["index"].get<size_t>();
      if (index >= message_["content"].size()) return;
      Json& block = message_["content"][index];
      if (block["type"] != "tool_use" || !partial_inputs_[index]) return;
      Json input;
      if (!ParseJson(*partial_inputs_[index], &input)) input = Json::object();
      block["input"] = std::move(input);
      partial_inputs_[index].reset();
    } else if (type == "message_delta") {
      message_["stop_reason"] = event["delta"]["stop_reason"];
      message_["stop_sequence"] = event["delta"]["stop_sequence"];
      message_["usage"] = event["usage"];
    }
  }

  Json Result() const override { return message_; }

 private:
  void AppendDelta(size_t index, const Json& delta) {
    if (index >= message_["content"].size()) return;
    Json& block = message_["content"][index];
    const std::string delta_type = delta.value("type", "");
    const std::string block_type = block.value("type", "");
    if (delta_type == "text_delta" && block_type == "text") {
      block["text"].get_ref<std::string&>() += delta["text"].get_ref<const std::string&>();
    } else if (delta_type == "thinking_delta" && block_type == "thinking") {
      block["thinking"].get_ref<std::string&>() += delta["thinking"].get_ref<const std::string&>();
    } else if (delta_type == "signature_delta" && block_type == "thinking") {
      block["signature"].get_ref<std::string&>() +=
          delta["signature"].get_ref<const std::string&>();
    } else if (delta_type == "input_json_delta" && block_type == "tool_use") {
      if (!partial_inputs_[index]) partial_inputs_[index].emplace();
      *partial_inputs_[index] += delta["partial_json"].get<std::string>();
    }
  }

  Json message_;
  std::vector<std::optional<std::string>> partial_inputs_;
};

}  // namespace

std::unique_ptr<EventGenerator> MakeMessagesGenerator(const GeneratorOptions& options) {
  return std::make_unique<MessagesGenerator>(options);
}

std::unique_ptr<ResponseAccumulator> MakeMessagesAccumulator(const GeneratorOptions& options) {
  return std::make_unique<MessagesAccumulator>(options);
}

std::unique_ptr<EventGenerator> MakeEventGenerator(Protocol protocol,
                                                   const GeneratorOptions& options) {
  switch (protocol) {
    case Protocol::kChatCompletions:
      return MakeChatGenerator(options);
    case Protocol::kResponses:
      return MakeResponsesGenerator(options);
    case Protocol::kMessages:
      return MakeMessagesGenerator(options);
  }
  return MakeChatGenerator(options);
}

std::unique_ptr<ResponseAccumulator> MakeAccumulator(Protocol protocol,
                                                     const GeneratorOptions& options) {
  switch (protocol) {
    case Protocol::kChatCompletions:
      return MakeChatAccumulator(options);
    case Protocol::kResponses:
      return MakeResponsesAccumulator(options);
    case Protocol::kMessages:
      return MakeMessagesAccumulator(options);
  }
  return MakeChatAccumulator(options);
}

std::string SseFrame(Protocol protocol, const Json& event) {
  std::string frame;
  if (protocol != Protocol::kChatCompletions) {
    frame = "event: " + event.value("type", std::string("message")) + "\n";
  }
  frame += "data: ";
  AppendJson(&frame, event);
  frame += "\n\n";
  return frame;
}

std::string SseDone(Protocol protocol) {
  return protocol == Protocol::kChatCompletions ? "data: [DONE]\n\n" : "";
}

}  // namespace deepinfer::recipe

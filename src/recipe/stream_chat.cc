// Chat Completions chunks and the chat.completion accumulator (spec §4.1).
#include "recipe/stream_events.h"

namespace deepinfer::recipe {
namespace {

Json ChatUsage(const PromptUsage& prompt, int64_t completion_tokens) {
  const int64_t miss = std::max<int64_t>(0, prompt.prompt_tokens - prompt.prompt_cache_hit_tokens);
  Json usage = Json::object();
  usage["prompt_tokens"] = prompt.prompt_tokens;
  usage["completion_tokens"] = completion_tokens;
  usage["total_tokens"] = prompt.prompt_tokens + completion_tokens;
  usage["prompt_tokens_details"] = Json{{"cached_tokens", prompt.prompt_cache_hit_tokens}};
  usage["prompt_cache_hit_tokens"] = prompt.prompt_cache_hit_tokens;
  usage["prompt_cache_miss_tokens"] = miss;
  return usage;
}

const char* ChatFinishReason(FinishReason reason) {
  switch (reason) {
    case FinishReason::kToolCalls:
      return "tool_calls";
    case FinishReason::kContentFilter:
      return "content_filter";
    case FinishReason::kLength:
      return "length";
    default:
      return "stop";
  }
}

class ChatGenerator : public EventGenerator {
 public:
  explicit ChatGenerator(const GeneratorOptions& options) : options_(options) {}

  void Generate(const OutputChunk& chunk, std::vector<Json>* events) override {
    Json delta = Json::object();
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart:
        prompt_usage_ = chunk.prompt_usage;
        fingerprint_ = chunk.system_fingerprint ? Json(*chunk.system_fingerprint) : Json(nullptr);
        delta["role"] = "assistant";
        if (options_.thinking_mode) {
          delta["content"] = nullptr;
          delta["reasoning_content"] = "";
        } else {
          delta["content"] = "";
        }
        break;
      case OutputChunk::Kind::kRaw:
        delta["content"] = chunk.text;
        if (options_.thinking_mode) delta["reasoning_content"] = nullptr;
        break;
      case OutputChunk::Kind::kReasoning:
        delta["content"] = nullptr;
        delta["reasoning_content"] = chunk.text;
        break;
      case OutputChunk::Kind::kToolCallBegin:
        return;
      case OutputChunk::Kind::kToolCall: {
        const int64_t index = tool_calls_++;
        Json call = Json::object();
        call["index"] = index;
        call["id"] = "call_" + options_.response_id + "_" + std::to_string(index);
        call["type"] = "function";
        call["function"] = Json{{"name", chunk.text}, {"arguments", ""}};
        delta["tool_calls"] = Json::array({std::move(call)});
        break;
      }
      case OutputChunk::Kind::kArgumentsDelta: {
        Json call = Json::object();
        call["index"] = tool_calls_ > 0 ? tool_calls_ - 1 : 0;
        call["function"] = Json{{"arguments", chunk.text}};
        delta["tool_calls"] = Json::array({std::move(call)});
        break;
      }
      case OutputChunk::Kind::kFinish:
        delta["content"] = "";
        if (options_.thinking_mode) delta["reasoning_content"] = nullptr;
        events->push_back(MakeChunk(std::move(delta), ChatFinishReason(chunk.finish_reason),
                                    ChatUsage(prompt_usage_, chunk.completion_tokens)));
        return;
    }
    events->push_back(MakeChunk(std::move(delta), nullptr, nullptr));
  }

 private:
  Json MakeChunk(Json delta, Json finish_reason, Json usage) const {
    Json choice = Json::object();
    choice["index"] = 0;
    choice["delta"] = std::move(delta);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = std::move(finish_reason);
    Json out = Json::object();
    out["id"] = options_.response_id;
    out["object"] = "chat.completion.chunk";
    out["created"] = options_.created;
    out["model"] = options_.model;
    out["system_fingerprint"] = fingerprint_;
    out["choices"] = Json::array({std::move(choice)});
    if (!usage.is_null() || options_.include_usage) out["usage"] = std::move(usage);
    return out;
  }

  GeneratorOptions options_;
  PromptUsage prompt_usage_;
  Json fingerprint_ = nullptr;
  int64_t tool_calls_ = 0;
};

// Folds chat.completion.chunk events into a chat.completion object.
class ChatAccumulator : public ResponseAccumulator {
 public:
  explicit ChatAccumulator(const GeneratorOptions& options) : options_(options) {}

  void Append(const Json& event) override {
    if (!event.is_object() || !event.contains("choices")) return;
    if (auto usage = event.find("usage"); usage != event.end() && !usage->is_null()) {
      usage_ = *usage;
    }
    if (fingerprint_.is_null()) fingerprint_ = event.value("system_fingerprint", Json(nullptr));
    for (const Json& choice : event["choices"]) {
      const Json& delta = choice["delta"];
      AppendText(delta, "content", &content_);
      AppendText(delta, "reasoning_content", &reasoning_);
      if (auto calls = delta.find("tool_calls"); calls != delta.end()) {
        for (const Json& call : *calls) {
          if (call.contains("id")) {
            tool_calls_.push_back(Json{{"id", call["id"]},
                                       {"type", call.value("type", "function")},
                                       {"function", call["function"]}});
            continue;
          }
          const size_t index = call.value("index", size_t{0});
          if (index < tool_calls_.size()) {
            tool_calls_[index]["function"]["arguments"].get_ref<std::string&>() +=
                call["function"]["arguments"].get_ref<const std::string&>();
          }
        }
      }
      if (auto finish = choice.find("finish_reason");
          finish != choice.end() && !finish->is_null()) {
        finish_reason_ = *finish;
      }
    }
  }

  Json Result() const override {
    Json message = Json::object();
    message["role"] = "assistant";
    message["content"] = content_;
    if (!reasoning_.is_null()) message["reasoning_content"] = reasoning_;
    if (!tool_calls_.empty()) message["tool_calls"] = tool_calls_;
    Json choice = Json::object();
    choice["index"] = 0;
    choice["message"] = std::move(message);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason_;
    Json out = Json::object();
    out["id"] = options_.response_id;
    out["object"] = "chat.completion";
    out["created"] = options_.created;
    out["model"] = options_.model;
    out["system_fingerprint"] = fingerprint_;
    out["choices"] = Json::array({std::move(choice)});
    if (!usage_.is_null()) out["usage"] = usage_;
    return out;
  }

 private:
  static void AppendText(const Json& delta, const char* key, Json* target) {
    auto it = delta.find(key);
    if (it == delta.end() || !it->is_string()) return;
    if (target->is_null()) {
      *target = *it;
    } else {
      target->get_ref<std::string&>() += it->get_ref<const std::string&>();
    }
  }

  GeneratorOptions options_;
  Json content_ = nullptr;
  Json reasoning_ = nullptr;
  Json tool_calls_ = Json::array();
  Json finish_reason_ = nullptr;
  Json fingerprint_ = nullptr;
  Json usage_ = nullptr;
};

}  // namespace

std::unique_ptr<EventGenerator> MakeChatGenerator(const GeneratorOptions& options) {
  return std::make_unique<ChatGenerator>(options);
}

std::unique_ptr<ResponseAccumulator> MakeChatAccumulator(const GeneratorOptions& options) {
  return std::make_unique<ChatAccumulator>(options);
}

}  // namespace deepinfer::recipe

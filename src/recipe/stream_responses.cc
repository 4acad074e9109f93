// OpenAI Responses streaming events and the response accumulator (spec §4.2).
#include <algorithm>

#include "recipe/stream_events.h"

namespace deepinfer::recipe {
namespace {

// Incrementally decodes the JSON string value of `{"input": "..."}` argument fragments, so a
// custom tool call streams its raw input.
class CustomInputDecoder {
 public:
  std::string Feed(std::string_view fragment) {
    std::string out;
    for (char c : fragment) Step(c, &out);
    return out;
  }

 private:
  enum class State { kPrefix, kValue, kEscape, kUnicode, kDone };

  void Step(char c, std::string* out) {
    switch (state_) {
      case State::kPrefix:
        // Everything up to the opening quote of the value: `{"input": "`.
        if (c == '"') ++quotes_;
        if (c == '"' && quotes_ == 3) state_ = State::kValue;
        return;
      case State::kValue:
        if (c == '\\') {
          state_ = State::kEscape;
        } else if (c == '"') {
          state_ = State::kDone;
        } else {
          out->push_back(c);
        }
        return;
      case State::kEscape:
        state_ = State::kValue;
        switch (c) {
          case 'n':
            out->push_back('\n');
            break;
          case 't':
            out->push_back('\t');
            break;
          case 'r':
            out->push_back('\r');
            break;
          case 'b':
            out->push_back('\b');
            break;
          case 'f':
            out->push_back('\f');
            break;
          case 'u':
            state_ = State::kUnicode;
            hex_.clear();
            break;
          default:
            out->push_back(c);  // \" \\ \/
        }
        return;
      case State::kUnicode:
        hex_.push_back(c);
        if (hex_.size() < 4) return;
        state_ = State::kValue;
        AppendCodeUnit(static_cast<uint32_t>(std::strtoul(hex_.c_str(), nullptr, 16)), out);
        return;
      case State::kDone:
        return;
    }
  }

  void AppendCodeUnit(uint32_t unit, std::string* out) {
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      high_surrogate_ = unit;
      return;
    }
    uint32_t code = unit;
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      code =
          high_surrogate_ ? 0x10000 + ((high_surrogate_ - 0xD800) << 10) + (unit - 0xDC00) : 0xFFFD;
    }
    high_surrogate_ = 0;
    if (code < 0x80) {
      out->push_back(static_cast<char>(code));
    } else if (code < 0x800) {
      out->push_back(static_cast<char>(0xC0 | (code >> 6)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else if (code < 0x10000) {
      out->push_back(static_cast<char>(0xE0 | (code >> 12)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    } else {
      out->push_back(static_cast<char>(0xF0 | (code >> 18)));
      out->push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
      out->push_back(static_cast<char>(0x80 | (code & 0x3F)));
    }
  }

  State state_ = State::kPrefix;
  int quotes_ = 0;
  std::string hex_;
  uint32_t high_surrogate_ = 0;
};

Json ResponsesUsage(const PromptUsage& prompt, int64_t completion_tokens) {
  Json usage = Json::object();
  usage["input_tokens"] = prompt.prompt_tokens;
  usage["input_tokens_details"] = Json{{"cached_tokens", prompt.prompt_cache_hit_tokens}};
  usage["output_tokens"] = completion_tokens;
  usage["output_tokens_details"] = Json{{"reasoning_tokens", 0}};
  usage["total_tokens"] = prompt.prompt_tokens + completion_tokens;
  return usage;
}

Json TextPart(bool reasoning, const std::string& text) {
  Json part = Json::object();
  if (reasoning) {
    part["type"] = "reasoning_text";
  } else {
    part["type"] = "output_text";
    part["annotations"] = Json::array();
    part["logprobs"] = Json::array();
  }
  part["text"] = text;
  return part;
}

class ResponsesGenerator : public EventGenerator {
 public:
  explicit ResponsesGenerator(const GeneratorOptions& options) : options_(options) {
    response_["id"] = options.response_id;
    response_["object"] = "response";
    response_["created_at"] = options.created;
    response_["model"] = options.model;
    response_["status"] = "in_progress";
    response_["completed_at"] = nullptr;
    response_["error"] = nullptr;
    response_["incomplete_details"] = nullptr;
    response_["output"] = Json::array();
    response_["usage"] = nullptr;
  }

  void Generate(const OutputChunk& chunk, std::vector<Json>* events) override {
    if (finished_) return;
    if (chunk.kind != OutputChunk::Kind::kStart && !started_) return;
    switch (chunk.kind) {
      case OutputChunk::Kind::kStart:
        if (started_) return;
        started_ = true;
        prompt_usage_ = chunk.prompt_usage;
        events->push_back(ResponseEvent("response.created"));
        events->push_back(ResponseEvent("response.in_progress"));
        return;
      case OutputChunk::Kind::kRaw:
        AppendText(chunk.text, false, events);
        return;
      case OutputChunk::Kind::kReasoning:
        AppendText(chunk.text, true, events);
        return;
      case OutputChunk::Kind::kToolCall:
        StartToolCall(chunk.text, events);
        return;
      case OutputChunk::Kind::kArgumentsDelta:
        AppendArguments(chunk.text, events);
        return;
      case OutputChunk::Kind::kFinish:
        Finish(chunk, events);
        return;
      case OutputChunk::Kind::kToolCallBegin:
        return;
    }
  }

 private:
  Json& Output() { return response_["output"]; }

  int64_t NextSequence() { return sequence_++; }

  Json ResponseEvent(const char* type) {
    Json event = Json::object();
    event["type"] = type;
    event["response"] = response_;
    event["sequence_number"] = NextSequence();
    return event;
  }

  // Opens `item` as the active output item: output_item.added (without its content part)
  // and, for messages and reasoning, content_part.added.
  void OpenItem(Json item, std::vector<Json>* events) {
    const int64_t index = static_cast<int64_t>(Output().size());
    Json added_item = item;
    const bool has_part = item.contains("content") && !item["content"].empty();
    Json part;
    if (has_part) {
      part = item["content"].back();
      added_item["content"] = Json::array();
    }
    Output().push_back(std::move(item));
    active_ = index;
    Json added = Json::object();
    added["type"] = "response.output_item.added";
    added["item"] = std::move(added_item);
    added["output_index"] = index;
    added["sequence_number"] = NextSequence();
    events->push_back(std::move(added));
    if (!has_part) return;
    Json part_added = Json::object();
    part_added["type"] = "response.content_part.added";
    part_added["content_index"] = 0;
    part_added["item_id"] = Output()[index]["id"];
    part_added["output_index"] = index;
    part_added["part"] = std::move(part);
    part_added["sequence_number"] = NextSequence();
    events->push_back(std::move(part_added));
  }

  void CloseItem(const std::string& status, std::vector<Json>* events) {
    if (active_ < 0) return;
    const int64_t index = active_;
    active_ = -1;
    if (custom_input_) {
      AppendCustomInput(index, "", events);
      custom_input_.reset();
    }
    Json& item = Output()[index];
    item["status"] = status;
    const std::string type = item["type"].get<std::string>();
    if (type == "message" || type == "reasoning") {
      const bool reasoning = type == "reasoning";
      for (size_t content_index = 0; content_index < item["content"].size(); ++content_index) {
        const Json& part = item["content"][content_index];
        Json done = Json::object();
        done["type"] = reasoning ? "response.reasoning_text.done" : "response.output_text.done";
        done["content_index"] = content_index;
        done["item_id"] = item["id"];
        if (!reasoning) done["logprobs"] = Json::array();
        done["output_index"] = index;
        done["sequence_number"] = NextSequence();
        done["text"] = part["text"];
        events->push_back(std::move(done));
        Json part_done = Json::object();
        part_done["type"] = "response.content_part.done";
        part_done["content_index"] = content_index;
        part_done["item_id"] = item["id"];
        part_done["output_index"] = index;
        part_done["part"] = part;
        part_done["sequence_number"] = NextSequence();
        events->push_back(std::move(part_done));
      }
    } else if (type == "function_call") {
      Json done = Json::object();
      done["type"] = "response.function_call_arguments.done";
      done["arguments"] = item["arguments"];
      done["item_id"] = item["id"];
      done["output_index"] = index;
      done["sequence_number"] = NextSequence();
      events->push_back(std::move(done));
    } else if (type == "custom_tool_call") {
      Json done = Json::object();
      done["type"] = "response.custom_tool_call_input.done";
      done["input"] = item["input"];
      done["item_id"] = item["id"];
      done["output_index"] = index;
      done["sequence_number"] = NextSequence();
      events->push_back(std::move(done));
    }
    Json item_done = Json::object();
    item_done["type"] = "response.output_item.done";
    item_done["item"] = item;
    item_done["output_index"] = index;
    item_done["sequence_number"] = NextSequence();
    events->push_back(std::move(item_done));
  }

  void AppendText(const std::string& delta, bool reasoning, std::vector<Json>* events) {
    const char* wanted = reasoning ? "reasoning" : "message";
    const bool continues = active_ >= 0 && Output()[active_]["type"] == wanted;
    if (!continues) {
      CloseItem("completed", events);
      const std::string index = std::to_string(Output().size());
      Json item = Json::object();
      if (reasoning) {
        item["type"] = "reasoning";
        item["id"] = "rs_" + options_.response_id + "_" + index;
        item["status"] = "in_progress";
        item["content"] = Json::array({TextPart(true, "")});
        item["summary"] = Json::array();
      } else {
        item["type"] = "message";
        item["id"] = "msg_" + options_.response_id + "_" + index;
        item["status"] = "in_progress";
        item["role"] = "assistant";
        item["phase"] = "final_answer";
        item["content"] = Json::array({TextPart(false, "")});
      }
      OpenItem(std::move(item), events);
    }
    Json& item = Output()[active_];
    item["content"][0]["text"].get_ref<std::string&>() += delta;
    Json event = Json::object();
    event["type"] = reasoning ? "response.reasoning_text.delta" : "response.output_text.delta";
    event["content_index"] = 0;
    event["delta"] = delta;
    event["item_id"] = item["id"];
    if (!reasoning) event["logprobs"] = Json::array();
    event["output_index"] = active_;
    event["sequence_number"] = NextSequence();
    events->push_back(std::move(event));
  }

  void StartToolCall(const std::string& name, std::vector<Json>* events) {
    if (active_ >= 0 && Output()[active_]["type"] == "message") {
      Output()[active_]["phase"] = "commentary";
    }
    CloseItem("completed", events);
    const std::string index = std::to_string(Output().size());
    const std::string call_id =
        "call_" + options_.response_id + "_" + std::to_string(tool_calls_++);
    Json item = Json::object();
    const auto& custom = options_.custom_tool_names;
    if (std::find(custom.begin(), custom.end(), name) != custom.end()) {
      custom_input_ = std::make_unique<CustomInputDecoder>();
      item["type"] = "custom_tool_call";
      item["id"] = "ctc_" + options_.response_id + "_" + index;
      item["status"] = "in_progress";
      item["call_id"] = call_id;
      item["name"] = name;
      item["input"] = "";
    } else {
      item["type"] = "function_call";
      item["id"] = "fc_" + options_.response_id + "_" + index;
      item["status"] = "in_progress";
      item["call_id"] = call_id;
      const size_t separator = name.find("::");
      if (separator == std::string::npos) {
        item["name"] = name;
      } else {
        item["name"] = name.substr(separator + 2);
        item["namespace"] = name.substr(0, separator);
      }
      item["arguments"] = "";
    }
    OpenItem(std::move(item), events);
  }

  void AppendArguments(const std::string& delta, std::vector<Json>* events) {
    if (active_ < 0) return;
    Json& item = Output()[active_];
    if (item["type"] == "function_call") {
      item["arguments"].get_ref<std::string&>() += delta;
      Json event = Json::object();
      event["type"] = "response.function_call_arguments.delta";
      event["delta"] = delta;
      event["item_id"] = item["id"];
      event["output_index"] = active_;
      event["sequence_number"] = NextSequence();
      events->push_back(std::move(event));
    } else if (custom_input_) {
      AppendCustomInput(active_, custom_input_->Feed(delta), events);
    }
  }

  void AppendCustomInput(int64_t index, const std::string& delta, std::vector<Json>* events) {
    if (delta.empty()) return;
    Json& item = Output()[index];
    if (item["type"] != "custom_tool_call") return;
    item["input"].get_ref<std::string&>() += delta;
    Json event = Json::object();
    event["type"] = "response.custom_tool_call_input.delta";
    event["delta"] = delta;
    event["item_id"] = item["id"];
    event["output_index"] = index;
    event["sequence_number"] = NextSequence();
    events->push_back(std::move(event));
  }

  void Finish(const OutputChunk& chunk, std::vector<Json>* events) {
    const char* incomplete = nullptr;
    if (chunk.finish_reason == FinishReason::kLength) incomplete = "max_output_tokens";
    if (chunk.finish_reason == FinishReason::kContentFilter) incomplete = "content_filter";
    const std::string status = incomplete ? "incomplete" : "completed";
    if (incomplete) response_["incomplete_details"] = Json{{"reason", incomplete}};
    response_["status"] = status;
    response_["usage"] = ResponsesUsage(prompt_usage_, chunk.completion_tokens);
    response_["completed_at"] =
        options_.completed_at != 0 ? options_.completed_at : options_.created;
    CloseItem(status, events);
    events->push_back(ResponseEvent(incomplete ? "response.incomplete" : "response.completed"));
    finished_ = true;
  }

  GeneratorOptions options_;
  Json response_ = Json::object();
  int64_t active_ = -1;
  int64_t sequence_ = 0;
  int64_t tool_calls_ = 0;
  std::unique_ptr<CustomInputDecoder> custom_input_;
  PromptUsage prompt_usage_;
  bool started_ = false;
  bool finished_ = false;
};

// The response is the snapshot carried by the last response.* lifecycle event.
class ResponsesAccumulator : public ResponseAccumulator {
 public:
  explicit ResponsesAccumulator(const GeneratorOptions& options) : options_(options) {}

  void Append(const Json& event) override {
    if (!event.is_object()) return;
    auto response = event.find("response");
    if (response != event.end()) result_ = *response;
  }

  Json Result() const override {
    if (!result_.is_null()) return result_;
    Json out = Json::object();
    out["id"] = options_.response_id;
    out["object"] = "response";
    out["created_at"] = options_.created;
    out["model"] = options_.model;
    out["status"] = "in_progress";
    out["completed_at"] = nullptr;
    out["error"] = nullptr;
    out["incomplete_details"] = nullptr;
    out["output"] = Json::array();
    out["usage"] = nullptr;
    return out;
  }

 private:
  GeneratorOptions options_;
  Json result_ = nullptr;
};

}  // namespace

std::unique_ptr<EventGenerator> MakeResponsesGenerator(const GeneratorOptions& options) {
  return std::make_unique<ResponsesGenerator>(options);
}

std::unique_ptr<ResponseAccumulator> MakeResponsesAccumulator(const GeneratorOptions& options) {
  return std::make_unique<ResponsesAccumulator>(options);
}

}  // namespace deepinfer::recipe

// OpenAI Chat Completions -> ConvertedRequest (spec §5 "Chat Completions").
#include <set>
#include <string>

#include "recipe/convert.h"
#include "recipe/convert_common.h"

namespace deepinfer::recipe {
namespace {

using internal::BadRequest;
using internal::BodyError;
using internal::FieldReader;

constexpr size_t kMaxStopSequences = 16;

// Thinking mode and effort (spec §5 "Thinking resolution", Chat).
base::Status ResolveThinking(const Json& body, const ConvertOptions& options, bool* thinking,
                             std::optional<ReasoningEffort>* effort) {
  FieldReader reader;
  const Json* thinking_config = reader.OptObject(body, "thinking");
  std::optional<std::string> thinking_type;
  if (thinking_config != nullptr) {
    FieldReader inner("thinking");
    thinking_type = inner.OptEnum(*thinking_config, "type", {"enabled", "disabled", "adaptive"});
    if (!inner.ok()) return inner.status();
  }
  const std::optional<std::string> effort_name = reader.OptEnum(
      body, "reasoning_effort", {"none", "minimal", "low", "medium", "high", "xhigh", "max"});
  if (!reader.ok()) return reader.status();

  if (thinking_type && *thinking_type != "disabled") {
    *thinking = true;
  } else if (thinking_type) {
    *thinking = false;
  } else if (effort_name) {
    *thinking = *effort_name != "none";
  } else {
    *thinking = options.default_thinking_mode;
  }
  effort->reset();
  if (!*thinking) return base::Status::Ok();
  *effort = ReasoningEffort::kHigh;
  if (effort_name == "minimal" || effort_name == "low") *effort = ReasoningEffort::kLow;
  if (effort_name == "xhigh") *effort = ReasoningEffort::kXhigh;
  if (effort_name == "max") *effort = ReasoningEffort::kMax;
  return base::Status::Ok();
}

// Sampling fields: validation in the reference order (n, penalties, max_tokens, sampling,
// seed), then the engine extensions.
base::Status ReadSampling(const Json& body, const ConvertOptions& options, ConvertedRequest* out) {
  FieldReader reader;
  const auto n = reader.OptUnsigned(body, "n", UINT32_MAX);
  const auto frequency_penalty = reader.OptNumber(body, "frequency_penalty");
  const auto presence_penalty = reader.OptNumber(body, "presence_penalty");
  auto max_tokens = reader.OptUnsigned(body, "max_tokens", UINT32_MAX);
  const auto max_completion_tokens = reader.OptUnsigned(body, "max_completion_tokens", UINT32_MAX);
  const auto temperature = reader.OptNumber(body, "temperature");
  const auto top_p = reader.OptNumber(body, "top_p");
  const auto seed = reader.OptUnsigned(body, "seed");
  const auto top_k = reader.OptInteger(body, "top_k");
  const auto min_p = reader.OptNumber(body, "min_p");
  const auto repetition_penalty = reader.OptNumber(body, "repetition_penalty");
  const auto logprobs = reader.OptBool(body, "logprobs");
  const auto top_logprobs = reader.OptUnsigned(body, "top_logprobs", UINT32_MAX);
  if (!reader.ok()) return reader.status();
  if (!max_tokens) max_tokens = max_completion_tokens;

  if (n && *n != 1) {
    if (options.strict_recipe) {
      return BadRequest("Invalid n value (currently only n = 1 is supported)");
    }
    if (*n == 0 || *n > 128) return BadRequest("n must be in [1, 128]");
  }
  const std::optional<float> frequency =
      frequency_penalty ? std::optional<float>(static_cast<float>(*frequency_penalty))
                        : std::nullopt;
  const std::optional<float> presence =
      presence_penalty ? std::optional<float>(static_cast<float>(*presence_penalty)) : std::nullopt;
  if (frequency && (*frequency < -2 || *frequency > 2)) {
    return BadRequest("frequency_penalty must be in [-2, 2]");
  }
  if (presence && (*presence < -2 || *presence > 2)) {
    return BadRequest("presence_penalty must be in [-2, 2]");
  }
  DI_RETURN_IF_ERROR(internal::ValidateMaxTokens(max_tokens, "max_tokens"));
  const std::optional<float> temperature_f =
      temperature ? std::optional<float>(static_cast<float>(*temperature)) : std::nullopt;
  const std::optional<float> top_p_f =
      top_p ? std::optional<float>(static_cast<float>(*top_p)) : std::nullopt;
  DI_RETURN_IF_ERROR(internal::ValidateSampling(temperature_f, top_p_f));
  if (seed && *seed >= (uint64_t{1} << 63)) return BadRequest("seed must be in [0, 2^63)");
  if (top_logprobs && *top_logprobs > 20) return BadRequest("top_logprobs must be in [0, 20]");

  if (max_tokens) out->inference_options.max_tokens = static_cast<uint32_t>(*max_tokens);
  out->inference_options.temperature = temperature_f;
  out->inference_options.top_p = top_p_f;

  SamplingParams& sampling = out->sampling;
  sampling.max_tokens = out->inference_options.max_tokens;
  sampling.temperature = temperature_f;
  sampling.top_p = top_p_f;
  sampling.frequency_penalty = frequency;
  sampling.presence_penalty = presence;
  sampling.seed = seed;
  sampling.n = n ? static_cast<uint32_t>(*n) : 1;
  sampling.logprobs = logprobs.value_or(false);
  if (top_logprobs) sampling.top_logprobs = static_cast<uint32_t>(*top_logprobs);
  if (top_k) sampling.top_k = static_cast<int32_t>(*top_k);
  if (min_p) sampling.min_p = static_cast<float>(*min_p);
  if (repetition_penalty) sampling.repetition_penalty = static_cast<float>(*repetition_penalty);
  if (const auto it = body.find("user"); it != body.end()) sampling.user = *it;
  return base::Status::Ok();
}

// stop (string or <= 16 strings), stream, stream_options.
base::Status ReadStreamAndStop(const Json& body, ConvertedRequest* out) {
  FieldReader reader;
  std::vector<std::string> stops;
  bool stop_is_array = false;
  if (const Json* stop = reader.Get(body, "stop")) {
    if (stop->is_string()) {
      stops.push_back(stop->get<std::string>());
    } else if (stop->is_array()) {
      stop_is_array = true;
      for (const Json& item : *stop) {
        if (!item.is_string()) return BodyError("invalid type for `stop`, expected strings");
        stops.push_back(item.get<std::string>());
      }
    } else {
      return BodyError("invalid type for `stop`, expected a string or an array of strings");
    }
  }
  const auto stream = reader.OptBool(body, "stream");
  const Json* stream_options = reader.OptObject(body, "stream_options");
  std::optional<bool> include_usage;
  if (stream_options != nullptr) {
    FieldReader inner("stream_options");
    include_usage = inner.OptBool(*stream_options, "include_usage");
    if (!inner.ok()) return inner.status();
  }
  if (!reader.ok()) return reader.status();
  if (stop_is_array && stops.size() > kMaxStopSequences) {
    return BadRequest("ChatCompletionStopSequences string array too long: " +
                      std::to_string(stops.size()));
  }
  if (stream_options != nullptr && !stream.value_or(false)) {
    return BadRequest("stream_options should be set along with stream = true");
  }
  out->stream = stream.value_or(false);
  out->include_usage = !out->stream || include_usage.value_or(false);
  out->parsing_options.stop_sequences = stops;
  out->sampling.stop = std::move(stops);
  return base::Status::Ok();
}

// tools + tool_choice -> definitions and resolved choice.
base::Status ConvertTools(const Json& body, bool thinking, Conversation* conversation) {
  FieldReader reader;
  const Json* tools = reader.OptArray(body, "tools");
  const Json* choice = reader.Get(body, "tool_choice");
  if (!reader.ok()) return reader.status();

  std::string choice_mode = "auto";
  std::optional<std::string> named;
  if (choice != nullptr) {
    if (choice->is_string()) {
      choice_mode = choice->get<std::string>();
      if (choice_mode != "auto" && choice_mode != "none" && choice_mode != "required") {
        return BodyError("unknown variant `" + choice_mode + "` for `tool_choice`");
      }
    } else if (choice->is_object()) {
      FieldReader inner("tool_choice");
      const Json* function = inner.OptObject(*choice, "function");
      if (function == nullptr && inner.ok())
        return BodyError("missing field `tool_choice.function`");
      if (inner.ok()) named = FieldReader("tool_choice.function").ReqString(*function, "name");
      if (!inner.ok()) return inner.status();
    } else {
      return BodyError("invalid type for `tool_choice`");
    }
  }

  std::vector<ToolDefinition> definitions;
  std::vector<const Json*> raw_parameters;
  if (tools != nullptr) {
    for (size_t index = 0; index < tools->size(); ++index) {
      const Json& tool = (*tools)[index];
      FieldReader tool_reader("tools[" + std::to_string(index) + "]");
      const auto type = tool_reader.OptEnum(tool, "type", {"function"});
      const Json* function = tool_reader.OptObject(tool, "function");
      if (tool_reader.ok() && function == nullptr) {
        return BodyError("missing field `tools[" + std::to_string(index) + "].function`");
      }
      if (!tool_reader.ok()) return tool_reader.status();
      (void)type;
      FieldReader function_reader("tools[" + std::to_string(index) + "].function");
      ToolDefinition definition;
      definition.name = function_reader.ReqString(*function, "name");
      definition.description = function_reader.OptString(*function, "description");
      definition.strict = function_reader.OptBool(*function, "strict");
      if (!function_reader.ok()) return function_reader.status();
      DI_RETURN_IF_ERROR(internal::ValidateToolName(
          definition.name, "tools." + std::to_string(index) + ".function.name"));
      raw_parameters.push_back(function_reader.Get(*function, "parameters"));
      definitions.push_back(std::move(definition));
    }
  }
  if (choice_mode == "none") {
    conversation->tools.clear();
    conversation->tool_choice = ToolChoice::kNone;
    return base::Status::Ok();
  }
  conversation->tool_choice = ToolChoice::kAuto;
  if (definitions.empty()) return base::Status::Ok();

  std::set<std::string> names;
  for (size_t index = 0; index < definitions.size(); ++index) {
    if (!names.insert(definitions[index].name).second)
      return BadRequest("Tool names must be unique");
    if (raw_parameters[index] != nullptr) {
      DI_RETURN_IF_ERROR(internal::ValidateToolParameters(
          *raw_parameters[index], "tools." + std::to_string(index) + ".function.parameters"));
      definitions[index].parameters = *raw_parameters[index];
    }
  }
  return internal::FinishToolChoice(std::move(definitions), named, choice_mode == "required",
                                    thinking, conversation);
}

// Content of one message: a string or an array of parts. Collects text (parts joined with
// "\n\n", one image placeholder per image) and images.
base::Status ConvertContent(const Json* content, const std::string& path, std::string* text,
                            std::vector<ImageSource>* images) {
  text->clear();
  if (content == nullptr) return base::Status::Ok();
  if (content->is_string()) {
    *text = content->get<std::string>();
    return base::Status::Ok();
  }
  if (!content->is_array()) return BodyError("invalid type for `" + path + ".content`");
  std::vector<std::string> texts;
  for (size_t index = 0; index < content->size(); ++index) {
    const Json& part = (*content)[index];
    const std::string part_path = path + ".content[" + std::to_string(index) + "]";
    FieldReader reader(part_path);
    const auto type = reader.OptEnum(part, "type", {"text", "image_url", "file", "input_audio"});
    if (reader.ok() && !type) return BodyError("missing field `" + part_path + ".type`");
    if (!reader.ok()) return reader.status();
    if (*type == "text") {
      texts.push_back(reader.ReqString(part, "text"));
      if (!reader.ok()) return reader.status();
    } else if (*type == "image_url") {
      const Json* image_url = reader.Get(part, "image_url");
      std::string url;
      std::optional<std::string> detail;
      if (image_url != nullptr && image_url->is_string()) {
        url = image_url->get<std::string>();
      } else if (image_url != nullptr && image_url->is_object()) {
        FieldReader inner(part_path + ".image_url");
        url = inner.ReqString(*image_url, "url");
        detail = inner.OptString(*image_url, "detail");
        if (!inner.ok()) return inner.status();
      } else {
        return BodyError("missing field `" + part_path + ".image_url`");
      }
      ImageDetail parsed_detail;
      DI_RETURN_IF_ERROR(internal::ParseDetail(detail, &parsed_detail));
      images->push_back(internal::ImageFromUrl(std::move(url), parsed_detail));
      texts.emplace_back(internal::kImageToken);
    } else if (*type == "file") {
      const Json* file = reader.OptObject(part, "file");
      const Json& holder = file != nullptr ? *file : part;
      FieldReader inner(part_path);
      const auto file_id = inner.OptString(holder, "file_id");
      const auto file_data = inner.OptString(holder, "file_data");
      if (!inner.ok()) return inner.status();
      if (file_id) return internal::FileIdUnsupported(part_path);
      if (!file_data) return BadRequest(part_path + ": file must have file_data");
      images->push_back(internal::ImageFromUrl(*file_data, ImageDetail::kHigh));
      texts.emplace_back(internal::kImageToken);
    } else {
      return BadRequest("Unsupported content block");
    }
  }
  *text = internal::JoinTexts(texts, "\n\n");
  return base::Status::Ok();
}

// True when any client text that reaches the prompt spells the image placeholder.
bool MessagesContainImageToken(const Json& messages) {
  for (const Json& message : messages) {
    if (!message.is_object()) continue;
    for (const char* key : {"content", "reasoning_content"}) {
      auto it = message.find(key);
      if (it == message.end()) continue;
      if (it->is_string() && internal::ContainsImageToken(it->get_ref<const std::string&>())) {
        return true;
      }
      if (!it->is_array()) continue;
      for (const Json& part : *it) {
        if (!part.is_object()) continue;
        auto text = part.find("text");
        if (text != part.end() && text->is_string() &&
            internal::ContainsImageToken(text->get_ref<const std::string&>())) {
          return true;
        }
      }
    }
  }
  return false;
}

base::Status ReadToolCalls(const Json& array, const std::string& path,
                           std::vector<ToolCall>* calls) {
  for (size_t index = 0; index < array.size(); ++index) {
    const Json& call = array[index];
    const std::string call_path = path + ".tool_calls[" + std::to_string(index) + "]";
    FieldReader reader(call_path);
    ToolCall converted;
    converted.id = reader.ReqString(call, "id");
    const Json* function = reader.OptObject(call, "function");
    if (reader.ok() && function == nullptr)
      return BodyError("missing field `" + call_path + ".function`");
    if (!reader.ok()) return reader.status();
    FieldReader function_reader(call_path + ".function");
    converted.name = function_reader.ReqString(*function, "name");
    converted.arguments = function_reader.ReqString(*function, "arguments");
    if (!function_reader.ok()) return function_reader.status();
    calls->push_back(std::move(converted));
  }
  return base::Status::Ok();
}

// An assistant message with tool_calls plus the tool messages that must follow it.
base::Status ConvertAssistant(const Json& messages, size_t* index, std::vector<Message>* out) {
  const Json& message = messages[*index];
  const std::string path = "messages[" + std::to_string(*index) + "]";
  FieldReader reader(path);
  const Json* content = reader.Get(message, "content");
  const Json* tool_calls = reader.OptArray(message, "tool_calls");
  const auto reasoning = reader.OptString(message, "reasoning_content");
  if (!reader.ok()) return reader.status();
  if (content == nullptr && tool_calls == nullptr) {
    return BadRequest("Invalid assistant message: content or tool_calls must be set");
  }
  std::string text;
  std::vector<ImageSource> images;
  DI_RETURN_IF_ERROR(ConvertContent(content, path, &text, &images));
  if (!images.empty()) return internal::ImageNotAllowed("assistant");

  std::optional<std::vector<ToolCall>> calls;
  std::vector<Message> tool_results;
  if (tool_calls != nullptr) {
    if (tool_calls->empty()) {
      return BadRequest("Invalid '" + path +
                        ".tool_calls': empty array. Expected an array with minimum length 1, but "
                        "got an empty array instead.");
    }
    calls.emplace();
    DI_RETURN_IF_ERROR(ReadToolCalls(*tool_calls, path, &*calls));
    std::set<std::string> ids;
    for (const ToolCall& call : *calls) {
      if (!ids.insert(call.id).second) {
        return BadRequest("Duplicate value for 'tool_call_id' of " + call.id + " in message[" +
                          std::to_string(*index) + "]");
      }
    }
    std::set<std::string> answered;
    for (size_t k = 0; k < calls->size(); ++k) {
      ++*index;
      const bool is_tool = *index < messages.size() && messages[*index].is_object() &&
                           messages[*index].value("role", "") == "tool";
      if (!is_tool) {
        return BadRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. (insufficient tool messages following tool_calls message)");
      }
      const Json& result = messages[*index];
      const std::string result_path = "messages[" + std::to_string(*index) + "]";
      FieldReader result_reader(result_path);
      const std::string id = result_reader.ReqString(result, "tool_call_id");
      const Json* result_content = result_reader.Get(result, "content");
      if (!result_reader.ok()) return result_reader.status();
      if (ids.count(id) == 0) {
        return BadRequest(
            "An assistant message with 'tool_calls' must be followed by tool messages responding "
            "to each 'tool_call_id'. Unexpected tool_call_id: " +
            id);
      }
      if (!answered.insert(id).second) {
        return BadRequest("Duplicate value for 'tool_call_id' of " + id + " in message[" +
                          std::to_string(*index) + "]");
      }
      std::string result_text;
      std::vector<ImageSource> result_images;
      DI_RETURN_IF_ERROR(
          ConvertContent(result_content, result_path + ".content", &result_text, &result_images));
      tool_results.push_back(Message::Tool(std::move(result_text), std::move(result_images), id));
    }
  }
  out->push_back(Message::Assistant(std::move(text), reasoning.value_or(""), std::move(calls)));
  for (Message& result : tool_results) out->push_back(std::move(result));
  return base::Status::Ok();
}

base::Status ConvertMessageList(const Json& body, std::vector<Message>* out) {
  FieldReader reader;
  const Json* messages = reader.ReqArray(body, "messages");
  if (!reader.ok()) return reader.status();
  if (messages->empty()) return BadRequest("Empty input messages");
  for (size_t index = 0; index < messages->size(); ++index) {
    FieldReader role_reader("messages[" + std::to_string(index) + "]");
    role_reader.OptEnum((*messages)[index], "role",
                        {"system", "developer", "user", "assistant", "tool", "latest_reminder"});
    if (!role_reader.ok()) return role_reader.status();
  }
  if (MessagesContainImageToken(*messages)) return internal::ImageTokenNotAllowed();

  for (size_t index = 0; index < messages->size(); ++index) {
    const Json& message = (*messages)[index];
    const std::string path = "messages[" + std::to_string(index) + "]";
    FieldReader message_reader(path);
    const std::string role = message_reader.ReqString(message, "role");
    if (!message_reader.ok()) return message_reader.status();
    const Json* content = message_reader.Get(message, "content");
    std::string text;
    std::vector<ImageSource> images;
    if (role == "system" || role == "developer") {
      DI_RETURN_IF_ERROR(ConvertContent(content, path, &text, &images));
      if (!images.empty()) return internal::ImageNotAllowed("system");
      if (!text.empty()) out->push_back(Message::System(std::move(text)));
    } else if (role == "user") {
      DI_RETURN_IF_ERROR(ConvertContent(content, path, &text, &images));
      out->push_back(Message::User(std::move(text), std::move(images)));
    } else if (role == "assistant") {
      DI_RETURN_IF_ERROR(ConvertAssistant(*messages, &index, out));
    } else if (role == "tool") {
      return BadRequest(
          "Messages with role 'tool' must be a response to a preceding message with "
          "'tool_calls'");
    } else {  // latest_reminder
      DI_RETURN_IF_ERROR(ConvertContent(content, path, &text, &images));
      out->push_back(Message::LatestReminder(std::move(text)));
    }
  }
  return base::Status::Ok();
}

// response_format: text / json_object (needs "json" in the prompt) / json_schema (prompt as
// text; the schema goes to the engine) / anything else rejected.
base::Status ConvertResponseFormat(const Json& body, ConvertedRequest* out) {
  FieldReader reader;
  const Json* format = reader.OptObject(body, "response_format");
  if (!reader.ok()) return reader.status();
  if (format == nullptr) return base::Status::Ok();
  FieldReader inner("response_format");
  const std::string type = inner.ReqString(*format, "type");
  if (!inner.ok()) return inner.status();
  if (type == "json_object") {
    if (!internal::ContainsJsonInstruction(out->conversation.messages)) {
      return BadRequest(
          "Prompt must contain the word 'json' in some form to use 'response_format' of type "
          "'json_object'.");
    }
    out->conversation.response_format = ResponseFormat::kJsonObject;
    out->sampling.response_format_type = "json_object";
  } else if (type == "json_schema") {
    out->sampling.response_format_type = "json_schema";
    auto schema = format->find("json_schema");
    out->sampling.json_schema = schema != format->end() ? *schema : Json(nullptr);
  } else if (type != "text") {
    return BadRequest("response_format: only text and json_object are supported");
  }
  return base::Status::Ok();
}

}  // namespace

base::StatusOr<ConvertedRequest> ConvertChatCompletions(const Json& body,
                                                        const ConvertOptions& options) {
  if (!body.is_object()) return BodyError("expected a JSON object");
  ConvertedRequest out;
  out.protocol = Protocol::kChatCompletions;
  FieldReader reader;
  out.model = reader.ReqString(body, "model");
  reader.ReqArray(body, "messages");
  if (!reader.ok()) return reader.status();

  bool thinking = true;
  std::optional<ReasoningEffort> effort;
  DI_RETURN_IF_ERROR(ResolveThinking(body, options, &thinking, &effort));
  out.conversation.thinking_mode = thinking;
  out.conversation.reasoning_effort = effort;
  if (thinking) out.parsing_options.reasoning_initial_stage = ReasoningStage::kStart;
  if (const Json* config = FieldReader().OptObject(body, "thinking")) {
    out.sampling.thinking_budget_tokens = FieldReader().OptUnsigned(*config, "budget_tokens");
  }

  DI_RETURN_IF_ERROR(ReadSampling(body, options, &out));
  DI_RETURN_IF_ERROR(ReadStreamAndStop(body, &out));
  DI_RETURN_IF_ERROR(ConvertTools(body, thinking, &out.conversation));
  out.parsing_options.parse_tool_calls =
      !out.conversation.tools.empty() && out.conversation.tool_choice != ToolChoice::kNone;
  out.parsing_options.tool_call_initial_stage =
      out.conversation.tool_choice == ToolChoice::kRequired;
  DI_RETURN_IF_ERROR(ConvertMessageList(body, &out.conversation.messages));
  DI_RETURN_IF_ERROR(internal::ValidateToolText(out.conversation.tools, out.conversation.messages));
  DI_RETURN_IF_ERROR(ConvertResponseFormat(body, &out));
  out.parsing_options.parse_json_output =
      out.conversation.response_format == ResponseFormat::kJsonObject;
  return out;
}

}  // namespace deepinfer::recipe

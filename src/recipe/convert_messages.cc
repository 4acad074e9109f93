// Anthropic Messages -> ConvertedRequest (spec §5 "Messages").
#include <map>
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

base::Status ImageFromBlock(const Json& block, const std::string& path, ImageSource* image) {
  FieldReader reader(path);
  const Json* source = reader.OptObject(block, "source");
  if (reader.ok() && source == nullptr) return BodyError("missing field `" + path + ".source`");
  if (!reader.ok()) return reader.status();
  FieldReader source_reader(path + ".source");
  const std::string type = source_reader.ReqString(*source, "type");
  if (!source_reader.ok()) return source_reader.status();
  if (type == "base64") {
    const auto media_type = source_reader.OptEnum(
        *source, "media_type", {"image/jpeg", "image/png", "image/gif", "image/webp"});
    const std::string data = source_reader.ReqString(*source, "data");
    if (source_reader.ok() && !media_type) {
      return BodyError("missing field `" + path + ".source.media_type`");
    }
    if (!source_reader.ok()) return source_reader.status();
    return internal::Base64Image(*media_type, data, path, image);
  }
  if (type == "url") {
    std::string url = source_reader.ReqString(*source, "url");
    if (!source_reader.ok()) return source_reader.status();
    *image = internal::ImageFromUrl(std::move(url), ImageDetail::kHigh);
    return base::Status::Ok();
  }
  if (type == "file") return internal::FileIdUnsupported(path);
  return BadRequest(path + ": unsupported image source");
}

// One text / tool_reference / image / document block.
base::Status BlockContent(const Json& block, const std::string& type, const std::string& path,
                          std::string* text, std::vector<ImageSource>* images) {
  FieldReader reader(path);
  if (type == "text") {
    *text = reader.ReqString(block, "text");
  } else if (type == "tool_reference") {
    *text = reader.ReqString(block, "tool_name");
  } else if (type == "image") {
    ImageSource image;
    DI_RETURN_IF_ERROR(ImageFromBlock(block, path, &image));
    images->push_back(std::move(image));
    *text = std::string(internal::kImageToken);
  } else if (type == "document") {
    *text = std::string(internal::kUnsupportedDocument);
  } else {
    return BadRequest("Unsupported content block");
  }
  return reader.status();
}

// Text-like content (system, tool_result, system-role messages): a string or blocks of
// text / tool_reference / image / document, joined with "\n\n".
base::Status TextOrBlocks(const Json& content, const std::string& path, std::string* text,
                          std::vector<ImageSource>* images) {
  if (content.is_string()) {
    *text = content.get<std::string>();
    return base::Status::Ok();
  }
  if (!content.is_array()) return BodyError("invalid type for `" + path + "`");
  std::vector<std::string> texts;
  for (size_t index = 0; index < content.size(); ++index) {
    const Json& block = content[index];
    const std::string block_path = path + "[" + std::to_string(index) + "]";
    FieldReader reader(block_path);
    const std::string type = reader.ReqString(block, "type");
    if (!reader.ok()) return reader.status();
    std::string block_text;
    DI_RETURN_IF_ERROR(BlockContent(block, type, block_path, &block_text, images));
    texts.push_back(std::move(block_text));
  }
  *text = internal::JoinTexts(texts, "\n\n");
  return base::Status::Ok();
}

std::string JoinIds(const std::map<std::string, size_t>& ids) {
  std::string out;
  for (const auto& [id, index] : ids) {
    if (!out.empty()) out += ", ";
    out += id;
  }
  return out;
}

// `space`: the reference spells the message "messages.N: `tool_use`..." when checking before a
// block and "messages.N:`tool_use`..." when checking after a message.
base::Status UnresolvedToolUse(size_t message_index, const std::map<std::string, size_t>& ids,
                               bool space = true) {
  if (ids.empty()) return base::Status::Ok();
  return BadRequest(
      "messages." + std::to_string(message_index) + (space ? ": " : ":") +
      "`tool_use` ids were found without `tool_result` blocks immediately after: " + JoinIds(ids) +
      ". Each `tool_use` block must have a corresponding `tool_result` block in the "
      "next message.");
}

// Converts the message list; `pending` holds tool_use ids awaiting their results.
class MessageConverter {
 public:
  explicit MessageConverter(std::vector<Message>* out) : out_(out) {}

  base::Status Run(const Json& messages) {
    for (size_t index = 0; index < messages.size(); ++index) {
      const Json& message = messages[index];
      const std::string path = "messages." + std::to_string(index);
      FieldReader reader(path);
      const auto role = reader.OptEnum(message, "role", {"user", "assistant", "system"});
      const Json* content = reader.Get(message, "content");
      if (reader.ok() && !role) return BodyError("missing field `" + path + ".role`");
      if (!reader.ok()) return reader.status();
      if (*role == "system") {
        DI_RETURN_IF_ERROR(UnresolvedToolUse(index, pending_));
        std::string text;
        std::vector<ImageSource> images;
        if (content != nullptr) DI_RETURN_IF_ERROR(TextOrBlocks(*content, path, &text, &images));
        out_->push_back(Message::User("<system-reminder>\n" + text + "\n</system-reminder>",
                                      std::move(images)));
        continue;
      }
      if (content == nullptr || (content->is_array() && content->empty())) {
        return BadRequest(path + ": all messages must have non-empty content");
      }
      if (*role == "user") {
        DI_RETURN_IF_ERROR(User(*content, index));
      } else {
        DI_RETURN_IF_ERROR(Assistant(*content, index));
      }
    }
    return UnresolvedToolUse(messages.size() - 1, pending_, /*space=*/false);
  }

 private:
  base::Status User(const Json& content, size_t index) {
    if (content.is_string()) {
      DI_RETURN_IF_ERROR(UnresolvedToolUse(index, pending_));
      out_->push_back(Message::User(content.get<std::string>()));
      return base::Status::Ok();
    }
    if (!content.is_array())
      return BodyError("invalid type for `messages." + std::to_string(index) + ".content`");
    std::set<std::string> matched;
    for (size_t block_index = 0; block_index < content.size(); ++block_index) {
      const Json& block = content[block_index];
      const std::string path =
          "messages." + std::to_string(index) + ".content[" + std::to_string(block_index) + "]";
      FieldReader reader(path);
      const std::string type = reader.ReqString(block, "type");
      if (!reader.ok()) return reader.status();
      if (type == "text" || type == "tool_reference" || type == "image" || type == "document") {
        DI_RETURN_IF_ERROR(UnresolvedToolUse(index, pending_));
        std::string text;
        std::vector<ImageSource> images;
        DI_RETURN_IF_ERROR(BlockContent(block, type, path, &text, &images));
        out_->push_back(Message::User(std::move(text), std::move(images)));
      } else if (type == "tool_result") {
        DI_RETURN_IF_ERROR(ToolResult(block, index, block_index, path, &matched));
      } else if (type == "tool_use" || type == "server_tool_use" ||
                 type == "web_search_tool_result") {
        return BadRequest("messages." + std::to_string(index) + ": `" + type +
                          "` blocks can only be in `assistant` messages");
      } else if (type == "thinking" || type == "redacted_thinking") {
        return BadRequest("messages." + std::to_string(index) +
                          ".content: thinking blocks may only be in `assistant` messages");
      } else {
        return BadRequest("Unsupported content block");
      }
    }
    return UnresolvedToolUse(index == 0 ? 0 : index - 1, pending_, /*space=*/false);
  }

  base::Status ToolResult(const Json& block, size_t index, size_t block_index,
                          const std::string& path, std::set<std::string>* matched) {
    FieldReader reader(path);
    const std::string id = reader.ReqString(block, "tool_use_id");
    const Json* content = reader.Get(block, "content");
    if (!reader.ok()) return reader.status();
    const std::string where =
        "messages." + std::to_string(index) + ".content." + std::to_string(block_index);
    if (matched->count(id)) {
      return BadRequest(where +
                        ": each tool_use must have a single result. Found multiple "
                        "`tool_result` blocks with id: " +
                        id);
    }
    if (!pending_.count(id)) {
      return BadRequest("unexpected `" + where +
                        ": tool_use_id` found in `tool_result` blocks: " + id +
                        ". Each `tool_result` block must have a corresponding `tool_use` block in "
                        "the previous message.");
    }
    pending_.erase(id);
    matched->insert(id);
    std::string text;
    std::vector<ImageSource> images;
    if (content != nullptr) DI_RETURN_IF_ERROR(TextOrBlocks(*content, path, &text, &images));
    out_->push_back(Message::Tool(std::move(text), std::move(images), id));
    return base::Status::Ok();
  }

  base::Status Assistant(const Json& content, size_t index) {
    DI_RETURN_IF_ERROR(UnresolvedToolUse(index, pending_));
    if (content.is_string()) {
      out_->push_back(Message::Assistant(content.get<std::string>(), "", std::nullopt));
      return base::Status::Ok();
    }
    if (!content.is_array())
      return BodyError("invalid type for `messages." + std::to_string(index) + ".content`");
    std::string text;
    std::optional<std::string> reasoning;
    std::optional<std::vector<ToolCall>> calls;
    for (size_t block_index = 0; block_index < content.size(); ++block_index) {
      const Json& block = content[block_index];
      const std::string path =
          "messages." + std::to_string(index) + ".content[" + std::to_string(block_index) + "]";
      FieldReader reader(path);
      const std::string type = reader.ReqString(block, "type");
      if (!reader.ok()) return reader.status();
      if (type == "text" || type == "tool_reference" || type == "image" || type == "document") {
        if (calls) {
          return BadRequest("messages." + std::to_string(index) + "." +
                            std::to_string(block_index) +
                            ": `tool_use` ids were found without `tool_result` blocks immediately "
                            "after: " +
                            JoinIds(pending_) +
                            ". Each `tool_use` block must have a corresponding `tool_result` block "
                            "in the next message.");
        }
        std::string value;
        std::vector<ImageSource> images;
        DI_RETURN_IF_ERROR(BlockContent(block, type, path, &value, &images));
        if (!images.empty()) return internal::ImageNotAllowed("assistant");
        if (!text.empty()) text += "\n\n";
        text += value;
      } else if (type == "tool_use") {
        ToolCall call;
        call.id = reader.ReqString(block, "id");
        call.name = reader.ReqString(block, "name");
        const Json* input = reader.Get(block, "input");
        if (!reader.ok()) return reader.status();
        call.arguments = WriteJson(input != nullptr ? *input : Json(nullptr), JsonStyle::kPython);
        if (pending_.count(call.id)) {
          return BadRequest("messages." + std::to_string(index) + ".content." +
                            std::to_string(block_index) + ": `tool_use` ids must be unique");
        }
        pending_[call.id] = block_index;
        if (!calls) calls.emplace();
        calls->push_back(std::move(call));
      } else if (type == "tool_result") {
        return BadRequest("messages." + std::to_string(index) +
                          ": `tool_result` blocks can only be in `user` messages");
      } else if (type == "thinking") {
        const std::string thinking = reader.OptString(block, "thinking").value_or("");
        if (!reader.ok()) return reader.status();
        reasoning = reasoning ? *reasoning + "\n\n" + thinking : thinking;
      } else if (type == "redacted_thinking" || type == "server_tool_use" ||
                 type == "web_search_tool_result") {
        // Opaque or server-side content carries nothing the prompt can use.
      } else {
        return BadRequest("Unsupported content block");
      }
    }
    out_->push_back(Message::Assistant(std::move(text), reasoning.value_or(""), std::move(calls)));
    return base::Status::Ok();
  }

  std::vector<Message>* out_;
  std::map<std::string, size_t> pending_;
};

bool ContainsImageTokenDeep(const Json& value) {
  if (value.is_string()) return internal::ContainsImageToken(value.get_ref<const std::string&>());
  if (value.is_array()) {
    for (const Json& element : value) {
      if (ContainsImageTokenDeep(element)) return true;
    }
    return false;
  }
  if (!value.is_object()) return false;
  for (const char* key : {"text", "tool_name", "thinking", "content"}) {
    auto it = value.find(key);
    if (it != value.end() && ContainsImageTokenDeep(*it)) return true;
  }
  return false;
}

base::Status ResolveThinking(const Json& body, const ConvertOptions& options,
                             ConvertedRequest* out) {
  FieldReader reader;
  const Json* thinking = reader.OptObject(body, "thinking");
  const Json* output_config = reader.OptObject(body, "output_config");
  if (!reader.ok()) return reader.status();
  std::optional<std::string> type;
  std::optional<uint64_t> budget;
  if (thinking != nullptr) {
    FieldReader inner("thinking");
    type = inner.OptEnum(*thinking, "type", {"enabled", "disabled", "adaptive"});
    budget = inner.OptUnsigned(*thinking, "budget_tokens");
    if (!inner.ok()) return inner.status();
  }
  std::optional<std::string> effort;
  if (output_config != nullptr) {
    FieldReader inner("output_config");
    effort =
        inner.OptEnum(*output_config, "effort", {"low", "medium", "high", "xhigh", "max", "ultra"});
    if (!inner.ok()) return inner.status();
  }
  bool on = options.default_thinking_mode;
  if (type) {
    on = *type != "disabled";
  } else if (effort) {
    on = true;
  }
  Conversation& conversation = out->conversation;
  conversation.thinking_mode = on;
  conversation.reasoning_effort.reset();
  if (on) {
    conversation.reasoning_effort = ReasoningEffort::kHigh;
    if (effort == "low") conversation.reasoning_effort = ReasoningEffort::kLow;
    if (effort == "xhigh") conversation.reasoning_effort = ReasoningEffort::kXhigh;
    if (effort == "max" || effort == "ultra") conversation.reasoning_effort = ReasoningEffort::kMax;
  }
  out->inference_options.thinking_budget_tokens = budget;
  out->sampling.thinking_budget_tokens = budget;
  return base::Status::Ok();
}

base::Status ConvertTools(const Json& body, bool thinking, ConvertedRequest* out) {
  FieldReader reader;
  const Json* tools = reader.OptArray(body, "tools");
  const Json* choice = reader.OptObject(body, "tool_choice");
  if (!reader.ok()) return reader.status();
  std::string choice_type = "auto";
  std::optional<std::string> choice_name;
  if (choice != nullptr) {
    FieldReader inner("tool_choice");
    choice_type = inner.OptEnum(*choice, "type", {"auto", "any", "tool", "none"}).value_or("auto");
    if (choice_type == "tool") choice_name = inner.ReqString(*choice, "name");
    const auto disable_parallel = inner.OptBool(*choice, "disable_parallel_tool_use");
    if (!inner.ok()) return inner.status();
    if (choice_type != "none") out->inference_options.disable_parallel_tool_use = disable_parallel;
  }
  std::vector<ToolDefinition> definitions;
  std::set<std::string> names;
  for (size_t index = 0; tools != nullptr && index < tools->size(); ++index) {
    const Json& tool = (*tools)[index];
    const std::string path = "tools." + std::to_string(index);
    FieldReader tool_reader(path);
    const auto type = tool_reader.OptString(tool, "type");
    if (!tool_reader.ok()) return tool_reader.status();
    if (type && *type != "custom") return BadRequest(path + ": server tools are not supported");
    ToolDefinition definition;
    definition.name = tool_reader.ReqString(tool, "name");
    definition.description = tool_reader.OptString(tool, "description");
    const Json* schema = tool_reader.Get(tool, "input_schema");
    if (!tool_reader.ok()) return tool_reader.status();
    DI_RETURN_IF_ERROR(internal::ValidateToolName(definition.name, path + ".name"));
    if (!names.insert(definition.name).second) return BadRequest("Tool names must be unique");
    if (schema == nullptr) return BadRequest(path + ": missing input_schema");
    DI_RETURN_IF_ERROR(internal::ValidateToolParameters(*schema, path + ".input_schema"));
    definition.parameters = *schema;
    definitions.push_back(std::move(definition));
  }
  Conversation& conversation = out->conversation;
  conversation.tool_choice = ToolChoice::kAuto;
  if (choice_type == "none") {
    conversation.tool_choice = ToolChoice::kNone;
    return base::Status::Ok();
  }
  if (choice_type == "tool") {
    if (names.count(*choice_name) == 0) {
      return BadRequest("tool_choice: no tool named '" + *choice_name + "' was specified");
    }
    if (thinking) return BadRequest("Thinking mode does not support this tool_choice");
    for (ToolDefinition& tool : definitions) {
      if (tool.name == *choice_name) conversation.tools.push_back(std::move(tool));
    }
    conversation.tool_choice = ToolChoice::kRequired;
    return base::Status::Ok();
  }
  conversation.tools = std::move(definitions);
  return base::Status::Ok();
}

}  // namespace

base::StatusOr<ConvertedRequest> ConvertMessages(const Json& body, const ConvertOptions& options) {
  if (!body.is_object()) return BodyError("expected a JSON object");
  ConvertedRequest out;
  out.protocol = Protocol::kMessages;
  FieldReader reader;
  out.model = reader.ReqString(body, "model");
  const Json* messages = reader.ReqArray(body, "messages");
  const auto max_tokens = reader.OptUnsigned(body, "max_tokens", UINT32_MAX);
  const auto temperature = reader.OptNumber(body, "temperature");
  const auto top_p = reader.OptNumber(body, "top_p");
  const auto top_k = reader.OptInteger(body, "top_k");
  const auto stream = reader.OptBool(body, "stream");
  const Json* stops = reader.OptArray(body, "stop_sequences");
  const Json* system = reader.Get(body, "system");
  const Json* metadata = reader.OptObject(body, "metadata");
  if (!reader.ok()) return reader.status();
  std::vector<std::string> stop_sequences;
  for (size_t index = 0; stops != nullptr && index < stops->size(); ++index) {
    if (!(*stops)[index].is_string()) return BodyError("invalid type for `stop_sequences`");
    stop_sequences.push_back((*stops)[index].get<std::string>());
  }

  DI_RETURN_IF_ERROR(ResolveThinking(body, options, &out));
  DI_RETURN_IF_ERROR(internal::ValidateMaxTokens(max_tokens, "max_tokens"));
  const std::optional<float> temperature_f =
      temperature ? std::optional<float>(static_cast<float>(*temperature)) : std::nullopt;
  const std::optional<float> top_p_f =
      top_p ? std::optional<float>(static_cast<float>(*top_p)) : std::nullopt;
  DI_RETURN_IF_ERROR(internal::ValidateSampling(temperature_f, top_p_f));
  bool stops_valid = stop_sequences.size() <= kMaxStopSequences;
  for (const std::string& stop : stop_sequences) stops_valid = stops_valid && !stop.empty();
  if (!stops_valid) return BadRequest("stop_sequences must contain at most 16 non-empty strings");
  if (max_tokens) out.inference_options.max_tokens = static_cast<uint32_t>(*max_tokens);
  out.inference_options.temperature = temperature_f;
  out.inference_options.top_p = top_p_f;

  const bool thinking = out.conversation.thinking_mode;
  DI_RETURN_IF_ERROR(ConvertTools(body, thinking, &out));

  if (messages->empty()) return BadRequest("messages: at least one message is required");
  if (ContainsImageTokenDeep(*messages) || (system != nullptr && ContainsImageTokenDeep(*system))) {
    return internal::ImageTokenNotAllowed();
  }
  if (system != nullptr) {
    std::string text;
    std::vector<ImageSource> images;
    DI_RETURN_IF_ERROR(TextOrBlocks(*system, "system", &text, &images));
    if (!images.empty()) return internal::ImageNotAllowed("system");
    out.conversation.messages.push_back(Message::System(std::move(text)));
  }
  MessageConverter converter(&out.conversation.messages);
  DI_RETURN_IF_ERROR(converter.Run(*messages));
  DI_RETURN_IF_ERROR(internal::ValidateToolText(out.conversation.tools, out.conversation.messages));

  ParsingOptions& parsing = out.parsing_options;
  parsing.parse_tool_calls = !out.conversation.tools.empty();
  if (thinking) parsing.reasoning_initial_stage = ReasoningStage::kStart;
  parsing.tool_call_initial_stage = out.conversation.tool_choice == ToolChoice::kRequired;
  parsing.stop_sequences = stop_sequences;
  out.stream = stream.value_or(false);

  SamplingParams& sampling = out.sampling;
  sampling.max_tokens = out.inference_options.max_tokens;
  sampling.temperature = temperature_f;
  sampling.top_p = top_p_f;
  if (top_k) sampling.top_k = static_cast<int32_t>(*top_k);
  sampling.stop = std::move(stop_sequences);
  if (metadata != nullptr) {
    auto user = metadata->find("user_id");
    if (user != metadata->end()) sampling.user = *user;
  }
  return out;
}

}  // namespace deepinfer::recipe

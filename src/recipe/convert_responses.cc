// OpenAI Responses -> ConvertedRequest (spec §5 "Responses").
#include <algorithm>
#include <functional>
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

constexpr const char* kApplyPatchDescription =
#include "recipe/apply_patch_prompt.inc"
    ;
constexpr const char* kApplyPatchParameters =
    R"({"type":"object","additionalProperties":false,"properties":{"input":{"type":"string","description":"The entire contents of the apply_patch command (the *** Begin Patch ... *** End Patch envelope)."}},"required":["input"]})";

// A declared function after namespace flattening; parameters are validated later.
struct DeclaredTool {
  ToolDefinition definition;
  const Json* parameters = nullptr;  // null = not given ({})
  Json owned_parameters;             // used when parameters come from the recipe itself
};

struct ToolSet {
  std::vector<DeclaredTool> tools;
  std::map<std::pair<std::string, std::string>, std::string> namespace_names;
  std::set<std::string> top_level_names;
  std::map<std::pair<std::string, std::string>, std::string> historical_names;

  bool IsTaken(const std::string& candidate) const {
    if (top_level_names.count(candidate)) return true;
    for (const auto& [key, name] : namespace_names) {
      if (name == candidate) return true;
    }
    return false;
  }
};

std::string UniqueName(const std::string& base,
                       const std::function<bool(const std::string&)>& taken) {
  if (!taken(base)) return base;
  for (int index = 1;; ++index) {
    std::string candidate = base + "_" + std::to_string(index);
    if (!taken(candidate)) return candidate;
  }
}

base::Status ReadFunctionTool(const Json& tool, const std::string& path, DeclaredTool* out) {
  FieldReader reader(path);
  out->definition.name = reader.ReqString(tool, "name");
  out->definition.description = reader.OptString(tool, "description");
  out->definition.strict = reader.OptBool(tool, "strict");
  out->parameters = reader.Get(tool, "parameters");
  if (!reader.ok()) return reader.status();
  return internal::ValidateToolName(out->definition.name, path + ".name");
}

base::Status ConvertTools(const Json& body, ToolSet* set, std::vector<std::string>* custom_names) {
  FieldReader reader;
  const Json* tools = reader.OptArray(body, "tools");
  if (!reader.ok()) return reader.status();
  if (tools == nullptr) return base::Status::Ok();
  for (const Json& tool : *tools) {
    if (tool.is_object() && tool.value("type", "") == "function" && tool.contains("name") &&
        tool["name"].is_string()) {
      set->top_level_names.insert(tool["name"].get<std::string>());
    }
  }
  std::set<std::string> namespaces;
  for (size_t index = 0; index < tools->size(); ++index) {
    const Json& tool = (*tools)[index];
    const std::string path = "tools[" + std::to_string(index) + "]";
    FieldReader tool_reader(path);
    const std::string type = tool_reader.ReqString(tool, "type");
    if (!tool_reader.ok()) return tool_reader.status();
    if (type == "function") {
      DeclaredTool declared;
      DI_RETURN_IF_ERROR(ReadFunctionTool(tool, path, &declared));
      set->tools.push_back(std::move(declared));
    } else if (type == "namespace") {
      const std::string name = tool_reader.ReqString(tool, "name");
      const auto description = tool_reader.OptString(tool, "description");
      const Json* inner_tools = tool_reader.OptArray(tool, "tools");
      if (!tool_reader.ok()) return tool_reader.status();
      DI_RETURN_IF_ERROR(internal::ValidateToolName(name, path + ".name"));
      if (!namespaces.insert(name).second) {
        return BadRequest(path + ": duplicate namespace name '" + name + "'");
      }
      std::set<std::string> inner_names;
      for (size_t inner = 0; inner_tools != nullptr && inner < inner_tools->size(); ++inner) {
        const Json& function = (*inner_tools)[inner];
        const std::string inner_path = path + ".tools[" + std::to_string(inner) + "]";
        if (!function.is_object() || function.value("type", "") != "function") {
          return BadRequest(inner_path + ": custom tools are not supported inside a namespace");
        }
        DeclaredTool declared;
        DI_RETURN_IF_ERROR(ReadFunctionTool(function, inner_path, &declared));
        if (!inner_names.insert(declared.definition.name).second) {
          return BadRequest(inner_path + ": tool names within a namespace must be unique");
        }
        if (description && !description->empty()) {
          declared.definition.description =
              *description + "\n" + declared.definition.description.value_or("");
        }
        const std::string flat =
            UniqueName(name + "::" + declared.definition.name,
                       [&](const std::string& candidate) { return set->IsTaken(candidate); });
        set->namespace_names[{name, declared.definition.name}] = flat;
        declared.definition.name = flat;
        set->tools.push_back(std::move(declared));
      }
    } else if (type == "custom") {
      const std::string name = tool_reader.ReqString(tool, "name");
      if (!tool_reader.ok()) return tool_reader.status();
      if (name != "apply_patch") {
        return BadRequest("Unsupported custom tool: '" + name +
                          "'. Only 'apply_patch' is supported");
      }
      DeclaredTool declared;
      declared.definition.name = name;
      declared.definition.description = kApplyPatchDescription;
      declared.owned_parameters = Json::parse(kApplyPatchParameters);
      set->tools.push_back(std::move(declared));
      if (std::find(custom_names->begin(), custom_names->end(), name) == custom_names->end()) {
        custom_names->push_back(name);
      }
    }
    // web_search and other hosted tools are ignored.
  }
  return base::Status::Ok();
}

// Resolves tool_choice and validates schemas (spec: selectTools).
base::Status SelectTools(const Json& body, bool thinking, ToolSet* set,
                         Conversation* conversation) {
  FieldReader reader;
  const Json* choice = reader.Get(body, "tool_choice");
  if (!reader.ok()) return reader.status();
  std::string mode = "auto";
  std::optional<std::string> named;
  if (choice != nullptr && choice->is_string()) {
    mode = choice->get<std::string>();
    if (mode != "auto" && mode != "none" && mode != "required") {
      return BodyError("unknown variant `" + mode + "` for `tool_choice`");
    }
  } else if (choice != nullptr && choice->is_object()) {
    FieldReader inner("tool_choice");
    const std::string type = inner.ReqString(*choice, "type");
    if (!inner.ok()) return inner.status();
    if (type == "function" || type == "custom") {
      named = inner.ReqString(*choice, "name");
      if (!inner.ok()) return inner.status();
    } else if (type != "web_search" && type != "web_search_preview") {
      // Hosted-tool choices other than web search name tools we never declare.
      mode = "auto";
    }
  } else if (choice != nullptr) {
    return BodyError("invalid type for `tool_choice`");
  }
  if (mode == "none") {
    conversation->tools.clear();
    conversation->tool_choice = ToolChoice::kNone;
    return base::Status::Ok();
  }
  conversation->tool_choice = ToolChoice::kAuto;
  if (set->tools.empty()) return base::Status::Ok();
  std::set<std::string> names;
  std::vector<ToolDefinition> definitions;
  for (DeclaredTool& tool : set->tools) {
    if (!names.insert(tool.definition.name).second) return BadRequest("Tool names must be unique");
    if (!tool.owned_parameters.is_null()) {
      tool.definition.parameters = tool.owned_parameters;
    } else if (tool.parameters != nullptr) {
      DI_RETURN_IF_ERROR(internal::ValidateToolParameters(
          *tool.parameters, "Tool '" + tool.definition.name + "' parameters"));
      tool.definition.parameters = *tool.parameters;
    }
    definitions.push_back(tool.definition);
  }
  return internal::FinishToolChoice(std::move(definitions), named, mode == "required", thinking,
                                    conversation);
}

base::Status InputImage(const Json& block, const std::string& path, ImageSource* image) {
  FieldReader reader(path);
  auto url = reader.OptString(block, "image_url");
  const auto file_id = reader.OptString(block, "file_id");
  const auto detail = reader.OptString(block, "detail");
  if (!reader.ok()) return reader.status();
  if (url && url->empty()) url.reset();
  if (!url && !file_id) return BadRequest(path + ": input_image must have image_url or file_id");
  if (url && file_id)
    return BadRequest(path + ": input_image cannot have both image_url and file_id");
  if (!url) return internal::FileIdUnsupported(path);
  ImageDetail parsed;
  DI_RETURN_IF_ERROR(internal::ParseDetail(detail, &parsed));
  *image = internal::ImageFromUrl(*url, parsed);
  return base::Status::Ok();
}

// Message content / tool output: a string or content blocks.
base::Status ConvertContent(const Json& content, const std::string& path, std::string* text,
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
    if (type == "input_text" || type == "output_text") {
      texts.push_back(reader.ReqString(block, "text"));
      if (!reader.ok()) return reader.status();
    } else if (type == "input_image") {
      ImageSource image;
      DI_RETURN_IF_ERROR(InputImage(block, block_path, &image));
      images->push_back(std::move(image));
      texts.emplace_back(internal::kImageToken);
    } else if (type == "input_file") {
      texts.emplace_back(internal::kUnsupportedDocument);
    } else {
      return BadRequest("Unsupported content block");
    }
  }
  *text = internal::JoinTexts(texts, "\n\n");
  return base::Status::Ok();
}

// Function calls between messages, grouped into one assistant turn with their outputs.
struct CallGroup {
  std::vector<ToolCall> calls;
  std::map<std::string, Message> outputs;
};

class InputConverter {
 public:
  InputConverter(ToolSet* tools, std::vector<Message>* messages)
      : tools_(tools), messages_(messages) {}

  base::Status Run(const Json& items) {
    if (items.empty()) return BadRequest("Input items array must not be empty");
    for (size_t index = 0; index < items.size(); ++index) {
      DI_RETURN_IF_ERROR(Item(items[index], index));
    }
    FlushGroup();
    return CheckPending();
  }

 private:
  base::Status Item(const Json& item, size_t index) {
    const std::string path = "input[" + std::to_string(index) + "]";
    FieldReader reader(path);
    const auto type = reader.OptString(item, "type");
    if (!reader.ok()) return reader.status();
    if (!type || *type == "message") {
      DI_RETURN_IF_ERROR(CheckPending());
      FlushGroup();
      return PushMessage(item, path);
    }
    if (*type == "reasoning") {
      DI_RETURN_IF_ERROR(CheckPending());
      FlushGroup();
      return PushReasoning(item, path);
    }
    if (*type == "function_call" || *type == "custom_tool_call") {
      return PushCall(item, *type == "custom_tool_call", index, path);
    }
    if (*type == "function_call_output" || *type == "custom_tool_call_output") {
      return PushOutput(item, index, path);
    }
    return base::Status::Ok();  // other item types are ignored
  }

  base::Status PushMessage(const Json& item, const std::string& path) {
    FieldReader reader(path);
    const auto role = reader.OptEnum(item, "role", {"user", "assistant", "system", "developer"});
    const Json* content = reader.Get(item, "content");
    if (reader.ok() && !role) return BodyError("missing field `" + path + ".role`");
    if (reader.ok() && content == nullptr) return BodyError("missing field `" + path + ".content`");
    if (!reader.ok()) return reader.status();
    std::string text;
    std::vector<ImageSource> images;
    DI_RETURN_IF_ERROR(ConvertContent(*content, path + ".content", &text, &images));
    if (*role == "system") {
      if (!images.empty()) return internal::ImageNotAllowed("system");
      messages_->push_back(Message::System(std::move(text)));
    } else if (*role == "user" || *role == "developer") {
      messages_->push_back(Message::User(std::move(text), std::move(images)));
    } else {
      if (!images.empty()) return internal::ImageNotAllowed("assistant");
      if (!messages_->empty()) {
        Message& last = messages_->back();
        if (last.role == Role::kAssistant && !last.tool_calls) {
          if (!text.empty()) {
            if (!last.content.empty()) last.content += "\n\n";
            last.content += text;
          }
          return base::Status::Ok();
        }
      }
      messages_->push_back(Message::Assistant(std::move(text), "", std::nullopt));
    }
    return base::Status::Ok();
  }

  base::Status PushReasoning(const Json& item, const std::string& path) {
    FieldReader reader(path);
    const Json* content = reader.OptArray(item, "content");
    if (!reader.ok()) return reader.status();
    std::vector<std::string> texts;
    for (size_t k = 0; content != nullptr && k < content->size(); ++k) {
      FieldReader block_reader(path + ".content[" + std::to_string(k) + "]");
      texts.push_back(block_reader.ReqString((*content)[k], "text"));
      if (!block_reader.ok()) return block_reader.status();
    }
    const std::string text = internal::JoinTexts(texts, "\n");
    if (text.empty()) return base::Status::Ok();
    if (messages_->empty() || messages_->back().role != Role::kAssistant ||
        !messages_->back().content.empty()) {
      messages_->push_back(Message::Assistant("", "", std::nullopt));
    }
    Message& last = messages_->back();
    last.reasoning_content =
        last.reasoning_content.empty() ? text : last.reasoning_content + "\n" + text;
    return base::Status::Ok();
  }

  base::Status CheckCallId(const std::string& id, size_t index, bool output) {
    if (id.empty()) {
      return BadRequest("Invalid 'input[" + std::to_string(index) +
                        "].call_id': empty string. Expected a string with minimum length 1, but "
                        "got an empty string instead.");
    }
    if (!output) {
      if (pending_.count(id) || resolved_.count(id))
        return BadRequest("Duplicate 'call_id': " + id + ".");
      return base::Status::Ok();
    }
    if (!pending_.count(id)) {
      if (resolved_.count(id)) return BadRequest("Duplicate tool output for call_id: " + id + ".");
      return BadRequest("No tool call found for tool output with call_id " + id + ".");
    }
    return base::Status::Ok();
  }

  base::Status PushCall(const Json& item, bool custom, size_t index, const std::string& path) {
    FieldReader reader(path);
    ToolCall call;
    call.id = reader.ReqString(item, "call_id");
    call.name = reader.ReqString(item, "name");
    const auto namespace_name = reader.OptString(item, "namespace");
    std::string input;
    if (custom) {
      input = reader.ReqString(item, "input");
    } else {
      call.arguments = reader.ReqString(item, "arguments");
    }
    if (!reader.ok()) return reader.status();
    DI_RETURN_IF_ERROR(CheckCallId(call.id, index, /*output=*/false));
    pending_.insert(call.id);
    pending_order_.push_back(call.id);
    if (custom) {
      Json arguments = Json::object();
      arguments["input"] = input;
      call.arguments = WriteJson(arguments);
    } else if (namespace_name) {
      call.name = FlatName(*namespace_name, call.name);
    }
    group_.calls.push_back(std::move(call));
    return base::Status::Ok();
  }

  std::string FlatName(const std::string& ns, const std::string& name) {
    const auto key = std::make_pair(ns, name);
    if (auto it = tools_->namespace_names.find(key); it != tools_->namespace_names.end()) {
      return it->second;
    }
    if (auto it = tools_->historical_names.find(key); it != tools_->historical_names.end()) {
      return it->second;
    }
    std::string flat = UniqueName(ns + "::" + name, [&](const std::string& candidate) {
      if (tools_->IsTaken(candidate)) return true;
      for (const auto& [k, existing] : tools_->historical_names) {
        if (existing == candidate) return true;
      }
      return false;
    });
    tools_->historical_names[key] = flat;
    return flat;
  }

  base::Status PushOutput(const Json& item, size_t index, const std::string& path) {
    FieldReader reader(path);
    const std::string id = reader.ReqString(item, "call_id");
    const Json* output = reader.Get(item, "output");
    if (!reader.ok()) return reader.status();
    DI_RETURN_IF_ERROR(CheckCallId(id, index, /*output=*/true));
    pending_.erase(id);
    resolved_.insert(id);
    std::string text;
    std::vector<ImageSource> images;
    if (output != nullptr) {
      DI_RETURN_IF_ERROR(ConvertContent(*output, path + ".output", &text, &images));
    }
    Message result = Message::Tool(std::move(text), std::move(images), id);
    if (group_.calls.empty()) {
      messages_->push_back(std::move(result));
      return base::Status::Ok();
    }
    group_.outputs[id] = std::move(result);
    if (group_.outputs.size() >= group_.calls.size()) FlushGroup();
    return base::Status::Ok();
  }

  // Appends the grouped calls (sorted by call id) to the trailing assistant message, then
  // their outputs in the same order.
  void FlushGroup() {
    if (group_.calls.empty()) return;
    std::vector<ToolCall> calls = std::move(group_.calls);
    std::sort(calls.begin(), calls.end(),
              [](const ToolCall& a, const ToolCall& b) { return a.id < b.id; });
    std::vector<Message> results;
    for (const ToolCall& call : calls) {
      auto it = group_.outputs.find(call.id);
      if (it == group_.outputs.end()) continue;
      results.push_back(std::move(it->second));
      group_.outputs.erase(it);
    }
    if (messages_->empty() || messages_->back().role != Role::kAssistant) {
      messages_->push_back(Message::Assistant("", "", std::nullopt));
    }
    Message& last = messages_->back();
    if (!last.tool_calls) last.tool_calls.emplace();
    for (ToolCall& call : calls) last.tool_calls->push_back(std::move(call));
    for (Message& result : results) messages_->push_back(std::move(result));
    group_ = CallGroup();
  }

  base::Status CheckPending() {
    for (const std::string& id : pending_order_) {
      if (pending_.count(id)) return BadRequest("No tool output found for tool call " + id + ".");
    }
    return base::Status::Ok();
  }

  ToolSet* tools_;
  std::vector<Message>* messages_;
  CallGroup group_;
  std::set<std::string> pending_;
  std::vector<std::string> pending_order_;
  std::set<std::string> resolved_;
};

// Every client text that reaches the prompt, checked for the image placeholder.
bool InputContainsImageToken(const Json& body) {
  bool found = false;
  std::function<void(const Json&)> visit = [&](const Json& value) {
    if (found) return;
    if (value.is_string()) {
      found = internal::ContainsImageToken(value.get_ref<const std::string&>());
    } else if (value.is_array()) {
      for (const Json& element : value) visit(element);
    } else if (value.is_object()) {
      for (const char* key : {"content", "text", "output"}) {
        auto it = value.find(key);
        if (it != value.end()) visit(*it);
      }
    }
  };
  for (const char* key : {"instructions", "input"}) {
    auto it = body.find(key);
    if (it != body.end()) visit(*it);
  }
  return found;
}

base::Status ResolveThinking(const Json& body, const ConvertOptions& options,
                             Conversation* conversation) {
  FieldReader reader;
  const Json* reasoning = reader.OptObject(body, "reasoning");
  if (!reader.ok()) return reader.status();
  std::optional<std::string> effort;
  if (reasoning != nullptr) {
    FieldReader inner("reasoning");
    effort = inner.OptEnum(*reasoning, "effort",
                           {"none", "minimal", "low", "medium", "high", "xhigh", "max"});
    if (!inner.ok()) return inner.status();
  }
  conversation->thinking_mode = effort ? *effort != "none" : options.default_thinking_mode;
  conversation->reasoning_effort.reset();
  if (!conversation->thinking_mode) return base::Status::Ok();
  conversation->reasoning_effort = ReasoningEffort::kHigh;
  if (effort == "minimal" || effort == "low")
    conversation->reasoning_effort = ReasoningEffort::kLow;
  if (effort == "xhigh") conversation->reasoning_effort = ReasoningEffort::kXhigh;
  if (effort == "max") conversation->reasoning_effort = ReasoningEffort::kMax;
  return base::Status::Ok();
}

base::Status ConvertTextFormat(const Json& body, ConvertedRequest* out) {
  FieldReader reader;
  const Json* text = reader.OptObject(body, "text");
  if (!reader.ok()) return reader.status();
  if (text == nullptr) return base::Status::Ok();
  FieldReader inner("text");
  const Json* format = inner.OptObject(*text, "format");
  if (!inner.ok()) return inner.status();
  if (format == nullptr) return base::Status::Ok();
  FieldReader format_reader("text.format");
  const std::string type = format_reader.OptString(*format, "type").value_or("text");
  if (!format_reader.ok()) return format_reader.status();
  if (type == "json_schema") {
    // Same shape as Chat's response_format.json_schema: {name, schema, strict, ...}.
    out->sampling.response_format_type = "json_schema";
    out->sampling.json_schema = *format;
    out->sampling.json_schema.erase("type");
    return base::Status::Ok();
  }
  if (type != "json_object") return base::Status::Ok();
  if (!internal::ContainsJsonInstruction(out->conversation.messages)) {
    return BadRequest(
        "Response input messages must contain the word 'json' to use text.format of type "
        "json_object");
  }
  out->conversation.response_format = ResponseFormat::kJsonObject;
  out->sampling.response_format_type = "json_object";
  return base::Status::Ok();
}

}  // namespace

base::StatusOr<ConvertedRequest> ConvertResponses(const Json& body, const ConvertOptions& options) {
  if (!body.is_object()) return BodyError("expected a JSON object");
  ConvertedRequest out;
  out.protocol = Protocol::kResponses;
  FieldReader reader;
  out.model = reader.ReqString(body, "model");
  const auto instructions = reader.OptString(body, "instructions");
  const Json* input = reader.Get(body, "input");
  const auto max_output_tokens = reader.OptUnsigned(body, "max_output_tokens", UINT32_MAX);
  const auto temperature = reader.OptNumber(body, "temperature");
  const auto top_p = reader.OptNumber(body, "top_p");
  const auto stream = reader.OptBool(body, "stream");
  const auto top_logprobs = reader.OptUnsigned(body, "top_logprobs", 20);
  if (!reader.ok()) return reader.status();
  if (input != nullptr && !input->is_string() && !input->is_array()) {
    return BodyError("invalid type for `input`, expected a string or an array");
  }
  if (InputContainsImageToken(body)) return internal::ImageTokenNotAllowed();

  DI_RETURN_IF_ERROR(ResolveThinking(body, options, &out.conversation));
  DI_RETURN_IF_ERROR(internal::ValidateMaxTokens(max_output_tokens, "max_output_tokens"));
  const std::optional<float> temperature_f =
      temperature ? std::optional<float>(static_cast<float>(*temperature)) : std::nullopt;
  const std::optional<float> top_p_f =
      top_p ? std::optional<float>(static_cast<float>(*top_p)) : std::nullopt;
  DI_RETURN_IF_ERROR(internal::ValidateSampling(temperature_f, top_p_f));
  if (max_output_tokens)
    out.inference_options.max_tokens = static_cast<uint32_t>(*max_output_tokens);
  out.inference_options.temperature = temperature_f;
  out.inference_options.top_p = top_p_f;

  ToolSet tools;
  DI_RETURN_IF_ERROR(ConvertTools(body, &tools, &out.custom_tool_names));
  std::vector<Message>& messages = out.conversation.messages;
  if (instructions && !instructions->empty()) messages.push_back(Message::System(*instructions));
  if (input == nullptr) {
    if (messages.empty()) return BadRequest("Either input or instructions must be provided");
  } else if (input->is_string()) {
    messages.push_back(Message::User(input->get<std::string>()));
  } else {
    InputConverter converter(&tools, &messages);
    DI_RETURN_IF_ERROR(converter.Run(*input));
  }
  DI_RETURN_IF_ERROR(SelectTools(body, out.conversation.thinking_mode, &tools, &out.conversation));
  DI_RETURN_IF_ERROR(internal::ValidateToolText(out.conversation.tools, messages));
  DI_RETURN_IF_ERROR(ConvertTextFormat(body, &out));

  ParsingOptions& parsing = out.parsing_options;
  parsing.parse_tool_calls = !out.conversation.tools.empty();
  parsing.tool_call_initial_stage = out.conversation.tool_choice == ToolChoice::kRequired;
  parsing.parse_json_output = out.conversation.response_format == ResponseFormat::kJsonObject;
  if (out.conversation.thinking_mode) parsing.reasoning_initial_stage = ReasoningStage::kStart;
  out.stream = stream.value_or(false);

  SamplingParams& sampling = out.sampling;
  sampling.max_tokens = out.inference_options.max_tokens;
  sampling.temperature = temperature_f;
  sampling.top_p = top_p_f;
  if (top_logprobs) {
    sampling.logprobs = true;
    sampling.top_logprobs = static_cast<uint32_t>(*top_logprobs);
  }
  if (const auto it = body.find("user"); it != body.end()) sampling.user = *it;
  return out;
}

}  // namespace deepinfer::recipe

#include "recipe/convert_common.h"

#include <cmath>

namespace deepinfer::recipe::internal {

base::Status BadRequest(std::string_view message) { return base::InvalidArgumentError(message); }

base::Status BodyError(std::string_view detail) {
  return base::InvalidArgumentError("invalid request body: " + std::string(detail));
}

std::string FieldReader::Where(std::string_view key) const {
  if (path_.empty()) return std::string(key);
  return path_ + "." + std::string(key);
}

void FieldReader::TypeError(std::string_view key, std::string_view expected) {
  Fail(BodyError("invalid type for `" + Where(key) + "`, expected " + std::string(expected)));
}

const Json* FieldReader::Get(const Json& object, std::string_view key) {
  if (!object.is_object()) {
    Fail(BodyError("invalid type for `" + (path_.empty() ? std::string("body") : path_) +
                   "`, expected an object"));
    return nullptr;
  }
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> FieldReader::OptString(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_string()) {
    TypeError(key, "a string");
    return std::nullopt;
  }
  return value->get<std::string>();
}

std::string FieldReader::ReqString(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value == nullptr) {
    if (object.is_object()) Fail(BodyError("missing field `" + Where(key) + "`"));
    return "";
  }
  if (!value->is_string()) {
    TypeError(key, "a string");
    return "";
  }
  return value->get<std::string>();
}

std::optional<bool> FieldReader::OptBool(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_boolean()) {
    TypeError(key, "a boolean");
    return std::nullopt;
  }
  return value->get<bool>();
}

std::optional<double> FieldReader::OptNumber(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value == nullptr) return std::nullopt;
  if (!value->is_number()) {
    TypeError(key, "a number");
    return std::nullopt;
  }
  return value->get<double>();
}

std::optional<uint64_t> FieldReader::OptUnsigned(const Json& object, std::string_view key,
                                                 uint64_t max) {
  const Json* value = Get(object, key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_unsigned() || (value->is_number_integer() && value->get<int64_t>() >= 0)) {
    const uint64_t number = value->get<uint64_t>();
    if (number <= max) return number;
  }
  TypeError(key, "a non-negative integer in range");
  return std::nullopt;
}

std::optional<int64_t> FieldReader::OptInteger(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value == nullptr) return std::nullopt;
  if (value->is_number_integer() && !value->is_number_unsigned()) return value->get<int64_t>();
  if (value->is_number_unsigned() && value->get<uint64_t>() <= INT64_MAX) {
    return static_cast<int64_t>(value->get<uint64_t>());
  }
  TypeError(key, "an integer");
  return std::nullopt;
}

const Json* FieldReader::OptArray(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value != nullptr && !value->is_array()) {
    TypeError(key, "an array");
    return nullptr;
  }
  return value;
}

const Json* FieldReader::ReqArray(const Json& object, std::string_view key) {
  const Json* value = OptArray(object, key);
  if (value == nullptr && ok() && object.is_object()) {
    Fail(BodyError("missing field `" + Where(key) + "`"));
  }
  return value;
}

const Json* FieldReader::OptObject(const Json& object, std::string_view key) {
  const Json* value = Get(object, key);
  if (value != nullptr && !value->is_object()) {
    TypeError(key, "an object");
    return nullptr;
  }
  return value;
}

std::optional<std::string> FieldReader::OptEnum(const Json& object, std::string_view key,
                                                const std::vector<std::string_view>& allowed) {
  std::optional<std::string> value = OptString(object, key);
  if (!value) return std::nullopt;
  for (std::string_view candidate : allowed) {
    if (*value == candidate) return value;
  }
  Fail(BodyError("unknown variant `" + *value + "` for `" + Where(key) + "`"));
  return std::nullopt;
}

bool ContainsImageToken(std::string_view text) {
  return text.find(kImageToken) != std::string_view::npos;
}

base::Status ImageTokenNotAllowed() {
  return BadRequest(
      "The sub-string \"<｜image｜>\" in your input is not allowed for this API. Please remove "
      "\"<｜image｜>\" from your input and try again.");
}

base::Status ImageNotAllowed(std::string_view role) {
  return BadRequest("Image in " + std::string(role) + " message is unsupported");
}

base::Status FileIdUnsupported(std::string_view path) {
  return BadRequest(std::string(path) +
                    ": file_id is not supported. Pass the image as a base64 data url instead.");
}

base::Status ValidateToolName(std::string_view name, std::string_view path) {
  bool valid = !name.empty() && name.size() <= 128;
  for (char c : name) {
    const bool allowed = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                         (c >= '0' && c <= '9') || c == '_' || c == '-';
    if (!allowed) valid = false;
  }
  if (valid) return base::Status::Ok();
  return BadRequest(std::string(path) +
                    ": expected 1-128 ASCII letters, digits, underscores or hyphens");
}

base::Status ValidateToolParameters(const Json& schema, std::string_view path) {
  if (schema.is_object()) {
    auto it = schema.find("type");
    if (it != schema.end() && it->is_string() && it->get<std::string>() == "object") {
      return base::Status::Ok();
    }
  }
  return BadRequest(std::string(path) + " must be a JSON Schema of type object");
}

base::Status ValidateMaxTokens(const std::optional<uint64_t>& value, std::string_view field) {
  if (value && *value == 0) return BadRequest(std::string(field) + " must be greater than zero");
  return base::Status::Ok();
}

base::Status ValidateSampling(const std::optional<float>& temperature,
                              const std::optional<float>& top_p) {
  if (temperature && (*temperature < 0 || *temperature > 2)) {
    return BadRequest("temperature must be in [0, 2]");
  }
  if (top_p && (std::isnan(*top_p) || *top_p <= 0 || *top_p > 1)) {
    return BadRequest("top_p must be in (0, 1]");
  }
  return base::Status::Ok();
}

base::Status ValidateToolText(const std::vector<ToolDefinition>& tools,
                              const std::vector<Message>& messages) {
  for (const ToolDefinition& tool : tools) {
    if (ContainsImageToken(tool.name) ||
        (tool.description && ContainsImageToken(*tool.description)) ||
        ContainsImageToken(WriteJson(tool.parameters, JsonStyle::kPython))) {
      return ImageTokenNotAllowed();
    }
  }
  for (const Message& message : messages) {
    if (message.role != Role::kAssistant || !message.tool_calls) continue;
    for (const ToolCall& call : *message.tool_calls) {
      if (ContainsImageToken(call.name) || ContainsImageToken(call.arguments)) {
        return ImageTokenNotAllowed();
      }
    }
  }
  return base::Status::Ok();
}

bool ContainsJsonInstruction(const std::vector<Message>& messages) {
  for (const Message& message : messages) {
    const std::string& text = message.content;
    for (size_t i = 0; i + 4 <= text.size(); ++i) {
      bool match = true;
      for (size_t k = 0; k < 4 && match; ++k) {
        char c = text[i + k];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        match = c == "json"[k];
      }
      if (match) return true;
    }
  }
  return false;
}

ImageSource ImageFromUrl(std::string url, ImageDetail detail) {
  ImageSource image;
  image.kind = url.rfind("data:", 0) == 0 ? ImageSource::Kind::kDataUrl : ImageSource::Kind::kUrl;
  image.data = std::move(url);
  image.detail = detail;
  return image;
}

base::Status ParseDetail(const std::optional<std::string>& name, ImageDetail* detail) {
  if (!name || *name == "high") {
    *detail = ImageDetail::kHigh;
  } else if (*name == "low") {
    *detail = ImageDetail::kLow;
  } else if (*name == "auto") {
    *detail = ImageDetail::kAuto;
  } else if (*name == "original") {
    *detail = ImageDetail::kOriginal;
  } else {
    return BodyError("unknown variant `" + *name + "` for `detail`");
  }
  return base::Status::Ok();
}

namespace {

bool IsBase64(std::string_view data) {
  size_t padding = 0;
  size_t count = 0;
  for (char c : data) {
    if (c == '=') {
      ++padding;
      ++count;
      continue;
    }
    const bool symbol = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                        (c >= '0' && c <= '9') || c == '+' || c == '/';
    if (!symbol || padding > 0) return false;
    ++count;
  }
  return padding <= 2 && count % 4 == 0;
}

}  // namespace

base::Status Base64Image(std::string_view media_type, std::string_view data, std::string_view path,
                         ImageSource* image) {
  if (!IsBase64(data)) return BadRequest(std::string(path) + ": base64 decode error");
  image->kind = ImageSource::Kind::kDataUrl;
  image->data = "data:" + std::string(media_type) + ";base64," + std::string(data);
  image->detail = ImageDetail::kHigh;
  return base::Status::Ok();
}

std::string JoinTexts(const std::vector<std::string>& texts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (i > 0) out.append(separator);
    out.append(texts[i]);
  }
  return out;
}

base::Status FinishToolChoice(std::vector<ToolDefinition> definitions,
                              const std::optional<std::string>& named, bool required, bool thinking,
                              Conversation* conversation) {
  if (named) {
    std::vector<ToolDefinition> kept;
    for (ToolDefinition& tool : definitions) {
      if (tool.name == *named) kept.push_back(std::move(tool));
    }
    if (kept.empty()) {
      return BadRequest("tool_choice: no tool named '" + *named + "' was specified");
    }
    definitions = std::move(kept);
    required = true;
  }
  if (required && thinking) return BadRequest("Thinking mode does not support this tool_choice");
  conversation->tools = std::move(definitions);
  conversation->tool_choice = required ? ToolChoice::kRequired : ToolChoice::kAuto;
  return base::Status::Ok();
}

}  // namespace deepinfer::recipe::internal

// Helpers shared by the three request converters: typed field access with serde-like
// "invalid request body" errors, and the validations every protocol applies.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe::internal {

inline constexpr std::string_view kImageToken = "<｜image｜>";
inline constexpr std::string_view kUnsupportedDocument = "[Unsupported Document]";

base::Status BadRequest(std::string_view message);
// "invalid request body: <detail>".
base::Status BodyError(std::string_view detail);

// Reads typed fields from a JSON object, remembering the first type error. A member that is
// absent or null reads as "not set" (serde Option semantics). Usage:
//   FieldReader reader("messages[0]");
//   auto text = reader.OptString(object, "content");
//   if (!reader.ok()) return reader.status();
class FieldReader {
 public:
  explicit FieldReader(std::string path = "") : path_(std::move(path)) {}

  bool ok() const { return status_.ok(); }
  const base::Status& status() const { return status_; }
  void Fail(const base::Status& status) {
    if (status_.ok()) status_ = status;
  }

  // The member, or nullptr when absent/null. Fails when `object` is not an object.
  const Json* Get(const Json& object, std::string_view key);
  std::optional<std::string> OptString(const Json& object, std::string_view key);
  std::string ReqString(const Json& object, std::string_view key);
  std::optional<bool> OptBool(const Json& object, std::string_view key);
  std::optional<double> OptNumber(const Json& object, std::string_view key);
  // Non-negative integer that fits `max`.
  std::optional<uint64_t> OptUnsigned(const Json& object, std::string_view key,
                                      uint64_t max = UINT64_MAX);
  std::optional<int64_t> OptInteger(const Json& object, std::string_view key);
  const Json* OptArray(const Json& object, std::string_view key);
  const Json* ReqArray(const Json& object, std::string_view key);
  const Json* OptObject(const Json& object, std::string_view key);
  // Fails with "unknown variant" unless the string is one of `allowed`.
  std::optional<std::string> OptEnum(const Json& object, std::string_view key,
                                     const std::vector<std::string_view>& allowed);

 private:
  std::string Where(std::string_view key) const;
  void TypeError(std::string_view key, std::string_view expected);

  std::string path_;
  base::Status status_;
};

bool ContainsImageToken(std::string_view text);
base::Status ImageTokenNotAllowed();
// "Image in <role> message is unsupported".
base::Status ImageNotAllowed(std::string_view role);
// "<path>: file_id is not supported. Pass the image as a base64 data url instead."
base::Status FileIdUnsupported(std::string_view path);

// Declared tool name: 1-128 of [A-Za-z0-9_-].
base::Status ValidateToolName(std::string_view name, std::string_view path);
// A parameter schema must be an object with "type": "object".
base::Status ValidateToolParameters(const Json& schema, std::string_view path);
// max_tokens > 0; temperature in [0, 2]; top_p in (0, 1].
base::Status ValidateMaxTokens(const std::optional<uint64_t>& value, std::string_view field);
base::Status ValidateSampling(const std::optional<float>& temperature,
                              const std::optional<float>& top_p);
// Tool names, descriptions and schemas and historical tool calls must not spell the image
// placeholder.
base::Status ValidateToolText(const std::vector<ToolDefinition>& tools,
                              const std::vector<Message>& messages);
// The common tail of Chat / Responses tool_choice handling: with a `named` tool, keeps only that
// definition (BadRequest if no tool has that name) and makes the choice required; rejects a
// required choice in thinking mode; stores the tools and the choice in `conversation`.
base::Status FinishToolChoice(std::vector<ToolDefinition> definitions,
                              const std::optional<std::string>& named, bool required, bool thinking,
                              Conversation* conversation);
// ASCII case-insensitive "json" in any message content.
bool ContainsJsonInstruction(const std::vector<Message>& messages);

// An image URL or data URL from a client ("data:" prefix -> data URL).
ImageSource ImageFromUrl(std::string url, ImageDetail detail);
// "low"/"high"/"auto"/"original" (absent -> high); anything else -> error.
base::Status ParseDetail(const std::optional<std::string>& name, ImageDetail* detail);
// Base64 image data -> data URL; invalid base64 -> "<path>: base64 decode error".
base::Status Base64Image(std::string_view media_type, std::string_view data, std::string_view path,
                         ImageSource* image);

std::string JoinTexts(const std::vector<std::string>& texts, std::string_view separator);

}  // namespace deepinfer::recipe::internal

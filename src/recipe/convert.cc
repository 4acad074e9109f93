#include "recipe/convert.h"

#include "recipe/convert_common.h"

namespace deepinfer::recipe {

base::StatusOr<ConvertedRequest> ConvertRequest(Protocol protocol, const Json& body,
                                                const ConvertOptions& options) {
  if (JsonDepth(body) > kMaxJsonDepth) {
    return internal::BodyError("nesting deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  try {
    switch (protocol) {
      case Protocol::kChatCompletions:
        return ConvertChatCompletions(body, options);
      case Protocol::kResponses:
        return ConvertResponses(body, options);
      case Protocol::kMessages:
        return ConvertMessages(body, options);
    }
  } catch (const std::exception& error) {
    // nlohmann throws only on programming errors here; never let it cross the boundary.
    return base::InternalError(std::string("request conversion failed: ") + error.what());
  }
  return base::InternalError("unknown protocol");
}

base::StatusOr<ConvertedRequest> ConvertRequestText(Protocol protocol, std::string_view body,
                                                    const ConvertOptions& options) {
  Json parsed;
  std::string error;
  if (!ParseJson(body, &parsed, &error)) {
    return base::InvalidArgumentError("invalid JSON request: " + error);
  }
  return ConvertRequest(protocol, parsed, options);
}

bool ParseProtocol(std::string_view name, Protocol* protocol) {
  if (name == "chat_completions") {
    *protocol = Protocol::kChatCompletions;
  } else if (name == "responses") {
    *protocol = Protocol::kResponses;
  } else if (name == "messages") {
    *protocol = Protocol::kMessages;
  } else {
    return false;
  }
  return true;
}

const char* ProtocolName(Protocol protocol) {
  switch (protocol) {
    case Protocol::kChatCompletions:
      return "chat_completions";
    case Protocol::kResponses:
      return "responses";
    case Protocol::kMessages:
      return "messages";
  }
  return "chat_completions";
}

ErrorResponse ErrorResponseFor(const base::Status& status) {
  const bool bad_request = status.code() == base::StatusCode::kInvalidArgument;
  const char* type = bad_request ? "invalid_request_error" : "internal_error";
  Json error = Json::object();
  error["message"] = status.message();
  error["type"] = type;
  error["param"] = nullptr;
  error["code"] = type;
  ErrorResponse response;
  response.http_status = bad_request ? 400 : 500;
  response.body = Json{{"error", std::move(error)}};
  return response;
}

}  // namespace deepinfer::recipe

// Request conversion: protocol request bodies -> validated ConvertedRequest (spec §2.2, §5).
//
// Errors are base::Status values:
//   * InvalidArgument = the client's fault (HTTP 400, type "invalid_request_error"); the
//     message is the exact client-visible text of the reference (e.g. "Empty input messages",
//     or "invalid request body: ..." when the body does not have the protocol's shape);
//   * any other code = internal (HTTP 500, "internal_error").
// Use ErrorResponseFor() to build the HTTP error.
#pragma once

#include <string_view>

#include "base/status.h"
#include "base/statusor.h"
#include "recipe/conversation.h"

namespace deepinfer::recipe {

struct ConvertOptions {
  // true: behave exactly like deepseek-recipe 0.1 (n != 1 rejected). false (server default):
  // n in [1, 128] is passed through to SamplingParams.
  bool strict_recipe = false;
  // Thinking mode when the request does not say (recipe default: on).
  bool default_thinking_mode = true;
};

// Converts a parsed request body (object key order preserved: tool schemas are rendered in
// the client's key order). Never throws.
base::StatusOr<ConvertedRequest> ConvertRequest(Protocol protocol, const Json& body,
                                                const ConvertOptions& options = {});
// Same, from the raw body text; malformed JSON gives InvalidArgument
// "invalid JSON request: ...".
base::StatusOr<ConvertedRequest> ConvertRequestText(Protocol protocol, std::string_view body,
                                                    const ConvertOptions& options = {});

base::StatusOr<ConvertedRequest> ConvertChatCompletions(const Json& body,
                                                        const ConvertOptions& options);
base::StatusOr<ConvertedRequest> ConvertResponses(const Json& body, const ConvertOptions& options);
base::StatusOr<ConvertedRequest> ConvertMessages(const Json& body, const ConvertOptions& options);

// "chat_completions" / "responses" / "messages" <-> Protocol.
bool ParseProtocol(std::string_view name, Protocol* protocol);
const char* ProtocolName(Protocol protocol);

// The HTTP error for a failed conversion (or any recipe error):
//   {"error":{"message","type","param":null,"code"}} with 400 / invalid_request_error for
//   InvalidArgument and 500 / internal_error otherwise (the same OpenAI shape for every
//   protocol, as the recipe does).
struct ErrorResponse {
  int http_status = 400;
  Json body;
};
ErrorResponse ErrorResponseFor(const base::Status& status);

}  // namespace deepinfer::recipe

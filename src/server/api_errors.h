// Error bodies in each API's shape (spec recipe.md §5 and the public API references):
//   OpenAI    {"error":{"message","type","param","code"}}
//   Anthropic {"type":"error","error":{"type","message"}}
// The shape follows the endpoint: /v1/messages* answer in the Anthropic shape, all other
// paths in the OpenAI shape.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::server {

enum class ErrorStyle { kOpenAI, kAnthropic };

ErrorStyle ErrorStyleForPath(std::string_view path);

// The `type` field for an HTTP status in the given style (e.g. 429 -> "rate_limit_error").
const char* ErrorType(ErrorStyle style, int http_status);

// Compact JSON text of the error body. `param` is the offending request field (OpenAI only).
std::string ErrorBody(ErrorStyle style, int http_status, std::string_view message,
                      std::optional<std::string_view> param = std::nullopt,
                      std::optional<std::string_view> code = std::nullopt);

}  // namespace deepinfer::server

#include "server/api_errors.h"

#include <nlohmann/json.hpp>

namespace deepinfer::server {

ErrorStyle ErrorStyleForPath(std::string_view path) {
  return path.rfind("/v1/messages", 0) == 0 ? ErrorStyle::kAnthropic : ErrorStyle::kOpenAI;
}

const char* ErrorType(ErrorStyle style, int http_status) {
  if (style == ErrorStyle::kAnthropic) {
    switch (http_status) {
      case 400:
        return "invalid_request_error";
      case 401:
        return "authentication_error";
      case 403:
        return "permission_error";
      case 404:
        return "not_found_error";
      case 408:
        return "timeout_error";
      case 413:
        return "request_too_large";
      case 429:
        return "rate_limit_error";
      case 503:
        return "overloaded_error";
      default:
        return http_status < 500 ? "invalid_request_error" : "api_error";
    }
  }
  switch (http_status) {
    case 401:
      return "authentication_error";
    case 404:
      return "not_found_error";
    case 429:
      return "rate_limit_error";
    case 503:
      return "service_unavailable";
    default:
      return http_status < 500 ? "invalid_request_error" : "internal_error";
  }
}

std::string ErrorBody(ErrorStyle style, int http_status, std::string_view message,
                      std::optional<std::string_view> param, std::optional<std::string_view> code) {
  using Json = nlohmann::ordered_json;
  Json body;
  if (style == ErrorStyle::kAnthropic) {
    body["type"] = "error";
    body["error"] = Json{{"type", ErrorType(style, http_status)}, {"message", message}};
  } else {
    Json error;
    error["message"] = message;
    error["type"] = ErrorType(style, http_status);
    error["param"] = param ? Json(*param) : Json(nullptr);
    error["code"] = code ? Json(*code) : Json(nullptr);
    body["error"] = std::move(error);
  }
  return body.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace deepinfer::server

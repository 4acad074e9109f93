// Server-sent events framing (text/event-stream): each event ends with a blank line.
#pragma once

#include <string>
#include <string_view>

namespace deepinfer::server {

inline constexpr const char* kEventStreamContentType = "text/event-stream";

// "data: <payload>\n\n" (payload must not contain newlines; compact JSON never does).
inline std::string SseData(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out += "data: ";
  out += payload;
  out += "\n\n";
  return out;
}

// "event: <type>\ndata: <payload>\n\n".
inline std::string SseEvent(std::string_view type, std::string_view payload) {
  std::string out;
  out.reserve(type.size() + payload.size() + 16);
  out += "event: ";
  out += type;
  out += "\ndata: ";
  out += payload;
  out += "\n\n";
  return out;
}

}  // namespace deepinfer::server

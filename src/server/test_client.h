// A minimal blocking HTTP/1.1 client over a plain loopback socket, for tests: sends raw bytes
// (so malformed, partial and slow requests can be written) and parses responses
// (Content-Length or chunked bodies).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

namespace deepinfer::server::testing {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;                            // de-chunked
};

class RawConnection {
 public:
  // Connects to 127.0.0.1:port; every read waits at most `timeout`.
  explicit RawConnection(uint16_t port,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(10000));
  ~RawConnection();
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;

  bool connected() const { return fd_ >= 0; }
  bool Send(const std::string& bytes);
  // Reads one response; nullopt on timeout / close before a complete response.
  std::optional<RawResponse> ReadResponse();
  // Reads the status line and headers only (the body stays unread).
  std::optional<RawResponse> ReadHeaders();
  // Reads until the peer closes; true if it closed within the timeout.
  bool WaitClosed();
  void Close();

 private:
  bool Fill();  // reads more bytes into buffer_; false on close/timeout/error
  bool ReadLine(std::string* line);
  bool ReadExact(size_t n, std::string* out);

  int fd_ = -1;
  std::string buffer_;
};

// One request on a fresh connection ("Connection: close").
std::optional<RawResponse> Request(uint16_t port, const std::string& method,
                                   const std::string& path, const std::string& body = "",
                                   const std::string& extra_headers = "");

}  // namespace deepinfer::server::testing

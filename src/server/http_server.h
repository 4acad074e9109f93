// Asynchronous HTTP/1.1 server core (Boost.Beast): a fixed pool of I/O threads serves every
// connection (no thread per connection).
//
// Per connection: read the header (header_timeout) -> reject an over-limit Content-Length with
// 413 before reading the body -> read the body (body_timeout) -> hand the request to the
// Handler together with a ResponseChannel. While the handler owns the channel the connection
// watches the socket: if the peer closes it, the channel's disconnect callback runs (used to
// cancel the generation). After the response is finished the connection reads the next
// request (keep-alive) or closes.
//
// Threading: handlers run on an I/O thread and must not block. ResponseChannel methods may be
// called from any thread (they post to the connection's strand).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace deepinfer::server {

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 0;  // 0: an ephemeral port (see HttpServer::port())
  int io_threads = 2;
  size_t max_body_bytes = 8 << 20;                  // larger bodies get 413
  size_t max_header_bytes = 64 << 10;               // larger headers get 431
  std::chrono::milliseconds header_timeout{15000};  // a started request's header: else 408
  std::chrono::milliseconds body_timeout{30000};    // its body after the header: else 408
  std::chrono::milliseconds idle_timeout{60000};    // keep-alive idle connection: closed
  // A stream whose unsent output exceeds this (client not reading) is treated as gone.
  size_t max_pending_output_bytes = 16 << 20;
};

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path plus query, e.g. "/v1/models?x=1"
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;

  // First value of a header (name is matched case-insensitively); "" when absent.
  std::string_view Header(std::string_view name) const;
};

// Where a handler writes its answer: either one complete response (Send), or a stream
// (BeginStream, any number of Write, then End). Exactly one of Send / End must eventually be
// called; a channel destroyed without it sends 500. All methods are thread-safe.
class ResponseChannel {
 public:
  virtual ~ResponseChannel() = default;
  using Headers = std::vector<std::pair<std::string, std::string>>;

  virtual void Send(int status, std::string content_type, std::string body,
                    Headers extra_headers = {}) = 0;
  // Sends the status line and headers with chunked transfer encoding.
  virtual void BeginStream(int status, std::string content_type, Headers extra_headers = {}) = 0;
  // Sends one chunk (e.g. a whole SSE event) and flushes it.
  virtual void Write(std::string data) = 0;
  virtual void End() = 0;

  // Runs `callback` once (on an I/O thread) if the client disconnects before the response is
  // finished. If it already disconnected, runs it right away.
  virtual void OnDisconnect(std::function<void()> callback) = 0;
  virtual bool disconnected() const = 0;
};

using HttpHandler = std::function<void(HttpRequest request, std::shared_ptr<ResponseChannel>)>;

// Produces the body of the errors the core itself raises (400/408/413/431), so they use the
// API's error shape. Arguments: HTTP status, request path ("" if unknown), message.
using ErrorBodyFn =
    std::function<std::string(int status, std::string_view path, std::string_view message)>;

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, HttpHandler handler, ErrorBodyFn error_body);
  ~HttpServer();  // Stop() + Join()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds, listens and starts the I/O threads. Error names the address on failure.
  base::Status Start();
  uint16_t port() const { return bound_port_; }

  // Stops accepting new connections (existing ones keep being served).
  void StopAccepting();
  // Closes every connection and stops the I/O threads.
  void Stop();
  void Join();

  int64_t open_connections() const;

  // Runs `task` on an I/O thread (used to leave a caller's thread, e.g. the engine's).
  void Post(std::function<void()> task);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  uint16_t bound_port_ = 0;
};

// Reason phrase-free helpers shared by the API layer.
bool IsValidUtf8(std::string_view text);

}  // namespace deepinfer::server

#include "server/http_server.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "base/logging.h"

namespace deepinfer::server {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

const char* ReasonPhrase(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 408:
      return "Request Timeout";
    case 413:
      return "Payload Too Large";
    case 429:
      return "Too Many Requests";
    case 431:
      return "Request Header Fields Too Large";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Unknown";
  }
}

std::string ToLower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string StatusLineAndHeaders(int status, const std::string& content_type, bool keep_alive,
                                 const ResponseChannel::Headers& extra, bool chunked,
                                 size_t content_length) {
  std::string out = fmt::format("HTTP/1.1 {} {}\r\n", status, ReasonPhrase(status));
  out += "Server: deepinfer\r\n";
  if (!content_type.empty()) out += fmt::format("Content-Type: {}\r\n", content_type);
  if (chunked) {
    out += "Transfer-Encoding: chunked\r\n";
  } else {
    out += fmt::format("Content-Length: {}\r\n", content_length);
  }
  out += keep_alive ? "Connection: keep-alive\r\n" : "Connection: close\r\n";
  for (const auto& [name, value] : extra) out += fmt::format("{}: {}\r\n", name, value);
  out += "\r\n";
  return out;
}

class Connection;

// One request's view of its connection; ops carry the request sequence number so that a
// late call for an already finished request is ignored.
class Channel final : public ResponseChannel {
 public:
  Channel(std::shared_ptr<Connection> connection, uint64_t sequence)
      : connection_(std::move(connection)), sequence_(sequence) {}
  ~Channel() override;

  void Send(int status, std::string content_type, std::string body, Headers extra_headers) override;
  void BeginStream(int status, std::string content_type, Headers extra_headers) override;
  void Write(std::string data) override;
  void End() override;
  void OnDisconnect(std::function<void()> callback) override;
  bool disconnected() const override;

 private:
  std::shared_ptr<Connection> connection_;
  uint64_t sequence_;
  std::atomic<bool> finished_{false};
};

class Connection : public std::enable_shared_from_this<Connection> {
 public:
  Connection(tcp::socket socket, const HttpServerOptions& options, const HttpHandler& handler,
             const ErrorBodyFn& error_body, std::atomic<int64_t>* open_count)
      : stream_(std::move(socket)),
        timer_(stream_.get_executor()),
        options_(options),
        handler_(handler),
        error_body_(error_body),
        open_count_(open_count) {
    open_count_->fetch_add(1);
  }
  ~Connection() { open_count_->fetch_sub(1); }

  void Start() {
    net::dispatch(stream_.get_executor(),
                  [self = shared_from_this()] { self->ReadHeader(/*first=*/true); });
  }

  // --- called by Channel (from any thread) ---
  void PostSend(uint64_t sequence, int status, std::string content_type, std::string body,
                ResponseChannel::Headers extra) {
    Post([=, this, self = shared_from_this(), body = std::move(body)]() mutable {
      if (!Current(sequence) || response_started_) return;
      response_started_ = true;
      response_finished_ = true;
      Queue(StatusLineAndHeaders(status, content_type, keep_alive_, extra, false, body.size()) +
            body);
    });
  }
  void PostBegin(uint64_t sequence, int status, std::string content_type,
                 ResponseChannel::Headers extra) {
    Post([=, this, self = shared_from_this()] {
      if (!Current(sequence) || response_started_) return;
      response_started_ = true;
      Queue(StatusLineAndHeaders(status, content_type, keep_alive_, extra, true, 0));
    });
  }
  void PostWrite(uint64_t sequence, std::string data) {
    if (data.empty()) return;
    Post([=, this, self = shared_from_this(), data = std::move(data)] {
      if (!Current(sequence) || !response_started_ || response_finished_) return;
      if (pending_bytes_ > options_.max_pending_output_bytes) {
        LOG_WARN("http: client is not reading its stream; closing the connection");
        Disconnected();
        return;
      }
      Queue(fmt::format("{:x}\r\n", data.size()) + data + "\r\n");
    });
  }
  void PostEnd(uint64_t sequence) {
    Post([=, this, self = shared_from_this()] {
      if (!Current(sequence) || !response_started_ || response_finished_) return;
      response_finished_ = true;
      Queue("0\r\n\r\n");
    });
  }
  void PostOnDisconnect(uint64_t sequence, std::function<void()> callback) {
    Post([=, this, self = shared_from_this(), callback = std::move(callback)]() mutable {
      if (sequence != sequence_) return;
      if (disconnected_) {
        if (!response_finished_) callback();
      } else {
        disconnect_callback_ = std::move(callback);
      }
    });
  }
  bool disconnected() const { return disconnected_flag_.load(); }
  // The handler dropped the channel without answering.
  void PostAbandoned(uint64_t sequence) {
    Post([=, this, self = shared_from_this()] {
      if (!Current(sequence)) return;
      if (!response_started_) {
        response_started_ = true;
        response_finished_ = true;
        const std::string body = error_body_(500, path_, "the request was not answered");
        Queue(StatusLineAndHeaders(500, "application/json", keep_alive_, {}, false, body.size()) +
              body);
      } else if (!response_finished_) {
        response_finished_ = true;
        Queue("0\r\n\r\n");
      }
    });
  }

 private:
  template <typename F>
  void Post(F&& f) {
    net::post(stream_.get_executor(), std::forward<F>(f));
  }
  bool Current(uint64_t sequence) const { return sequence == sequence_ && !closed_; }

  void ReadHeader(bool first) {
    if (closed_) return;
    parser_.emplace();
    parser_->header_limit(static_cast<uint32_t>(options_.max_header_bytes));
    parser_->body_limit(options_.max_body_bytes);
    in_request_ = false;
    ArmTimer(first || buffer_.size() > 0 ? options_.header_timeout : options_.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = shared_from_this()](beast::error_code ec, size_t) {
                              self->DisarmTimer();
                              self->OnHeader(self->timed_out_ ? beast::error::timeout : ec);
                            });
  }

  // Our own deadline (beast::tcp_stream's would close the socket, leaving no way to send
  // 408): on expiry the pending read is cancelled and its handler sees timed_out_.
  void ArmTimer(std::chrono::milliseconds timeout) {
    timed_out_ = false;
    const uint64_t epoch = ++timer_epoch_;
    timer_.expires_after(timeout);
    timer_.async_wait([self = shared_from_this(), epoch](beast::error_code ec) {
      // Cancelled, or expired just after the read finished (DisarmTimer bumped the epoch).
      if (ec || epoch != self->timer_epoch_) return;
      self->timed_out_ = true;
      beast::error_code ignored;
      self->stream_.socket().cancel(ignored);
    });
  }

  void DisarmTimer() {
    ++timer_epoch_;
    timer_.cancel();
  }

  void OnHeader(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      return FailAndClose(
          413, fmt::format("request body exceeds the limit of {} bytes", options_.max_body_bytes));
    }
    if (ec == beast::error::timeout) {
      // A client that started a request and stalled gets 408; an idle one is just closed.
      if (parser_->got_some() || buffer_.size() > 0) {
        return FailAndClose(408, "timed out reading the request header");
      }
      return Close();
    }
    if (ec == http::error::header_limit) return FailAndClose(431, "request header too large");
    if (ec) {
      if (ec != http::error::end_of_stream && ec != net::error::eof &&
          ec != net::error::operation_aborted && ec != net::error::connection_reset) {
        return FailAndClose(400, "malformed HTTP request: " + ec.message());
      }
      return Close();
    }
    path_ = std::string(parser_->get().target());
    if (const auto length = parser_->content_length();
        length && *length > options_.max_body_bytes) {
      return FailAndClose(413, fmt::format("request body of {} bytes exceeds the limit of {}",
                                           *length, options_.max_body_bytes));
    }
    ArmTimer(options_.body_timeout);
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code read_ec, size_t) {
                       self->DisarmTimer();
                       self->OnBody(self->timed_out_ ? beast::error::timeout : read_ec);
                     });
  }

  void OnBody(beast::error_code ec) {
    if (ec == beast::error::timeout) return FailAndClose(408, "timed out reading the body");
    if (ec == http::error::body_limit) {
      return FailAndClose(
          413, fmt::format("request body exceeds the limit of {} bytes", options_.max_body_bytes));
    }
    if (ec) return Close();
    auto message = parser_->release();
    keep_alive_ = message.keep_alive();
    HttpRequest request;
    request.method = std::string(message.method_string());
    request.target = std::string(message.target());
    request.path = request.target.substr(0, request.target.find('?'));
    for (const auto& field : message) {
      const auto name = field.name_string();
      const auto value = field.value();
      request.headers.emplace_back(ToLower(std::string_view(name.data(), name.size())),
                                   std::string(value.data(), value.size()));
    }
    request.body = std::move(message.body());
    ++sequence_;
    in_request_ = true;
    response_started_ = false;
    response_finished_ = false;
    disconnect_callback_ = nullptr;
    Watch();
    auto channel = std::make_shared<Channel>(shared_from_this(), sequence_);
    handler_(std::move(request), std::move(channel));
  }

  // While a request is being answered, keep one read pending to notice the peer closing.
  void Watch() {
    if (watching_ || closed_ || buffer_.size() > (1 << 20)) return;
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(4096),
                                     [self = shared_from_this()](beast::error_code ec, size_t n) {
                                       self->watching_ = false;
                                       self->buffer_.commit(n);
                                       if (ec && ec != net::error::operation_aborted)
                                         return self->Disconnected();
                                       if (self->closed_) return;
                                       if (self->response_finished_ && self->writes_.empty())
                                         return self->NextRequest();
                                       self->Watch();
                                     });
  }

  void Disconnected() {
    if (disconnected_) return;
    disconnected_ = true;
    disconnected_flag_ = true;
    NotifyDisconnect();
    Close();
  }

  // The handler learns about a disconnect only while its response is unfinished.
  void NotifyDisconnect() {
    auto callback = std::move(disconnect_callback_);
    disconnect_callback_ = nullptr;
    if (callback && in_request_ && !response_finished_) callback();
  }

  void Queue(std::string bytes) {
    pending_bytes_ += bytes.size();
    writes_.push_back(std::move(bytes));
    if (!writing_) WriteNext();
  }

  void WriteNext() {
    if (closed_) return;
    if (writes_.empty()) {
      if (response_finished_) {
        if (!keep_alive_) return linger_ ? LingerClose() : Close();
        if (watching_) {
          beast::error_code ignored;
          stream_.socket().cancel(ignored);  // the watch handler continues with NextRequest
        } else {
          NextRequest();
        }
      }
      return;
    }
    writing_ = true;
    net::async_write(stream_.socket(), net::buffer(writes_.front()),
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       self->writing_ = false;
                       self->pending_bytes_ -= self->writes_.front().size();
                       self->writes_.pop_front();
                       if (ec) return self->Disconnected();
                       self->WriteNext();
                     });
  }

  void NextRequest() {
    if (in_request_) {
      in_request_ = false;
      disconnect_callback_ = nullptr;
      ReadHeader(/*first=*/false);
    }
  }

  // After an error answer the client may still be sending (e.g. the body of a 413): closing
  // with unread input would reset the connection and could destroy the answer before the
  // client reads it. So: stop sending, discard input for a while, then close.
  void LingerClose() {
    if (closed_) return;
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ignored);
    ArmTimer(std::chrono::milliseconds(2000));
    Discard(0);
  }
  void Discard(size_t discarded) {
    if (closed_ || discarded > (4u << 20)) return Close();
    stream_.socket().async_read_some(
        net::buffer(discard_buffer_),
        [self = shared_from_this(), discarded](beast::error_code ec, size_t n) {
          if (ec) return self->Close();
          self->Discard(discarded + n);
        });
  }

  void FailAndClose(int status, const std::string& message) {
    linger_ = true;
    keep_alive_ = false;
    response_finished_ = true;
    const std::string body = error_body_(status, path_, message);
    Queue(StatusLineAndHeaders(status, "application/json", false, {}, false, body.size()) + body);
  }

  void Close() {
    if (closed_) return;
    closed_ = true;
    timer_.cancel();
    beast::error_code ignored;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
    stream_.socket().close(ignored);
    if (!disconnected_) {
      disconnected_ = true;
      disconnected_flag_ = true;
      NotifyDisconnect();
    }
  }

  beast::tcp_stream stream_;
  net::steady_timer timer_;
  bool timed_out_ = false;
  uint64_t timer_epoch_ = 0;
  const HttpServerOptions& options_;
  const HttpHandler& handler_;
  const ErrorBodyFn& error_body_;
  std::atomic<int64_t>* open_count_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  std::string path_;
  uint64_t sequence_ = 0;
  bool in_request_ = false;
  bool keep_alive_ = true;
  bool response_started_ = false;
  bool response_finished_ = false;
  bool watching_ = false;
  bool writing_ = false;
  bool closed_ = false;
  bool linger_ = false;
  std::array<char, 16384> discard_buffer_{};
  bool disconnected_ = false;
  std::atomic<bool> disconnected_flag_{false};
  std::deque<std::string> writes_;
  size_t pending_bytes_ = 0;
  std::function<void()> disconnect_callback_;
};

Channel::~Channel() {
  if (!finished_.load()) connection_->PostAbandoned(sequence_);
}
void Channel::Send(int status, std::string content_type, std::string body, Headers extra_headers) {
  if (finished_.exchange(true)) return;
  connection_->PostSend(sequence_, status, std::move(content_type), std::move(body),
                        std::move(extra_headers));
}
void Channel::BeginStream(int status, std::string content_type, Headers extra_headers) {
  if (finished_.load()) return;
  connection_->PostBegin(sequence_, status, std::move(content_type), std::move(extra_headers));
}
void Channel::Write(std::string data) {
  if (finished_.load()) return;
  connection_->PostWrite(sequence_, std::move(data));
}
void Channel::End() {
  if (finished_.exchange(true)) return;
  connection_->PostEnd(sequence_);
}
void Channel::OnDisconnect(std::function<void()> callback) {
  connection_->PostOnDisconnect(sequence_, std::move(callback));
}
bool Channel::disconnected() const { return connection_->disconnected(); }

}  // namespace

std::string_view HttpRequest::Header(std::string_view name) const {
  const std::string lower = ToLower(name);
  for (const auto& [key, value] : headers) {
    if (key == lower) return value;
  }
  return {};
}

struct HttpServer::Impl {
  Impl(HttpServerOptions o, HttpHandler h, ErrorBodyFn e)
      : options(std::move(o)), handler(std::move(h)), error_body(std::move(e)) {}
  HttpServerOptions options;
  HttpHandler handler;
  ErrorBodyFn error_body;
  net::io_context io{options.io_threads};
  std::optional<net::executor_work_guard<net::io_context::executor_type>> work;
  tcp::acceptor acceptor{io};
  std::vector<std::thread> threads;
  std::atomic<int64_t> open_connections{0};
  std::atomic<bool> accepting{false};

  void Accept() {
    acceptor.async_accept(net::make_strand(io), [this](beast::error_code ec, tcp::socket socket) {
      if (ec) {
        if (!accepting.load() || ec == net::error::operation_aborted) return;
        LOG_WARN("http: accept failed: {}", ec.message());
      } else {
        beast::error_code ignored;
        socket.set_option(tcp::no_delay(true), ignored);
        std::make_shared<Connection>(std::move(socket), options, handler, error_body,
                                     &open_connections)
            ->Start();
      }
      if (accepting.load()) Accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, HttpHandler handler, ErrorBodyFn error_body)
    : impl_(std::make_unique<Impl>(std::move(options), std::move(handler), std::move(error_body))) {
}

HttpServer::~HttpServer() {
  Stop();
  Join();
}

base::Status HttpServer::Start() {
  beast::error_code ec;
  const auto address = net::ip::make_address(impl_->options.host, ec);
  if (ec) return base::InvalidArgumentError(fmt::format("bad host '{}'", impl_->options.host));
  const tcp::endpoint endpoint(address, impl_->options.port);
  auto& acceptor = impl_->acceptor;
  acceptor.open(endpoint.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(endpoint, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) {
    return base::UnavailableError(fmt::format("cannot listen on {}:{}: {}", impl_->options.host,
                                              impl_->options.port, ec.message()));
  }
  bound_port_ = acceptor.local_endpoint().port();
  impl_->accepting = true;
  impl_->work.emplace(impl_->io.get_executor());
  impl_->Accept();
  for (int i = 0; i < std::max(1, impl_->options.io_threads); ++i) {
    impl_->threads.emplace_back([this] { impl_->io.run(); });
  }
  return base::Status::Ok();
}

void HttpServer::StopAccepting() {
  if (!impl_->accepting.exchange(false)) return;
  net::post(impl_->io, [this] {
    beast::error_code ignored;
    impl_->acceptor.close(ignored);
  });
}

void HttpServer::Stop() {
  StopAccepting();
  impl_->work.reset();
  impl_->io.stop();
}

void HttpServer::Join() {
  for (std::thread& thread : impl_->threads) {
    if (thread.joinable()) thread.join();
  }
  impl_->threads.clear();
}

void HttpServer::Post(std::function<void()> task) { net::post(impl_->io, std::move(task)); }

int64_t HttpServer::open_connections() const { return impl_->open_connections.load(); }

bool IsValidUtf8(std::string_view text) {
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x80) {
      ++i;
      continue;
    }
    int length = 0;
    uint32_t code = 0;
    if ((c & 0xE0) == 0xC0) {
      length = 2;
      code = c & 0x1F;
    } else if ((c & 0xF0) == 0xE0) {
      length = 3;
      code = c & 0x0F;
    } else if ((c & 0xF8) == 0xF0) {
      length = 4;
      code = c & 0x07;
    } else {
      return false;
    }
    if (i + length > n) return false;
    for (int k = 1; k < length; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      if ((cc & 0xC0) != 0x80) return false;
      code = (code << 6) | (cc & 0x3F);
    }
    // Overlong forms, surrogates and values past U+10FFFF are invalid.
    if ((length == 2 && code < 0x80) || (length == 3 && code < 0x800) ||
        (length == 4 && code < 0x10000) || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return false;
    }
    i += length;
  }
  return true;
}

}  // namespace deepinfer::server

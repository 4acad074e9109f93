#include "server/test_client.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cstring>

namespace deepinfer::server::testing {

RawConnection::RawConnection(uint16_t port, std::chrono::milliseconds timeout) {
  fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd_ < 0) return;
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  int one = 1;
  ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd_, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0) Close();
}

RawConnection::~RawConnection() { Close(); }

void RawConnection::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool RawConnection::Send(const std::string& bytes) {
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += static_cast<size_t>(n);
  }
  return true;
}

bool RawConnection::Fill() {
  if (fd_ < 0) return false;
  char chunk[16384];
  const ssize_t n = ::recv(fd_, chunk, sizeof(chunk), 0);
  if (n <= 0) return false;
  buffer_.append(chunk, static_cast<size_t>(n));
  return true;
}

bool RawConnection::ReadLine(std::string* line) {
  while (true) {
    const size_t end = buffer_.find("\r\n");
    if (end != std::string::npos) {
      *line = buffer_.substr(0, end);
      buffer_.erase(0, end + 2);
      return true;
    }
    if (!Fill()) return false;
  }
}

bool RawConnection::ReadExact(size_t n, std::string* out) {
  while (buffer_.size() < n) {
    if (!Fill()) return false;
  }
  out->append(buffer_, 0, n);
  buffer_.erase(0, n);
  return true;
}

std::optional<RawResponse> RawConnection::ReadHeaders() {
  std::string line;
  if (!ReadLine(&line) || line.rfind("HTTP/1.1 ", 0) != 0) return std::nullopt;
  RawResponse response;
  response.status = std::atoi(line.c_str() + 9);
  while (ReadLine(&line)) {
    if (line.empty()) return response;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) return std::nullopt;
    std::string name = line.substr(0, colon);
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    size_t value_start = colon + 1;
    while (value_start < line.size() && line[value_start] == ' ') ++value_start;
    response.headers[name] = line.substr(value_start);
  }
  return std::nullopt;
}

std::optional<RawResponse> RawConnection::ReadResponse() {
  auto response = ReadHeaders();
  if (!response) return std::nullopt;
  if (response->headers["transfer-encoding"] == "chunked") {
    std::string line;
    while (true) {
      if (!ReadLine(&line)) return std::nullopt;
      const size_t size = std::stoul(line, nullptr, 16);
      if (size == 0) {
        if (!ReadLine(&line)) return std::nullopt;  // the empty trailer line
        return response;
      }
      if (!ReadExact(size, &response->body) || !ReadLine(&line)) return std::nullopt;
    }
  }
  const auto length = response->headers.find("content-length");
  if (length == response->headers.end()) return std::nullopt;
  if (!ReadExact(std::stoul(length->second), &response->body)) return std::nullopt;
  return response;
}

bool RawConnection::WaitClosed() {
  while (Fill()) {
  }
  if (fd_ < 0) return false;
  char byte;
  const ssize_t n = ::recv(fd_, &byte, 1, 0);
  return n == 0;
}

std::optional<RawResponse> Request(uint16_t port, const std::string& method,
                                   const std::string& path, const std::string& body,
                                   const std::string& extra_headers) {
  RawConnection connection(port);
  if (!connection.connected()) return std::nullopt;
  std::string request = method + " " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\n";
  request += "Connection: close\r\n" + extra_headers;
  if (!body.empty() || method == "POST") {
    request +=
        "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  request += "\r\n" + body;
  if (!connection.Send(request)) return std::nullopt;
  return connection.ReadResponse();
}

}  // namespace deepinfer::server::testing

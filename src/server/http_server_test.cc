#include "server/http_server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

#include "server/test_client.h"

namespace deepinfer::server {
namespace {

using testing::RawConnection;
using testing::Request;

std::string ErrorJson(int status, std::string_view, std::string_view message) {
  return "{\"status\":" + std::to_string(status) + ",\"message\":\"" + std::string(message) + "\"}";
}

class HttpServerTest : public ::testing::Test {
 protected:
  void StartServer(HttpServerOptions options = {}) {
    options.port = 0;
    server_ = std::make_unique<HttpServer>(
        options,
        [this](HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
          Route(std::move(request), std::move(channel));
        },
        ErrorJson);
    ASSERT_TRUE(server_->Start().ok());
  }

  void Route(HttpRequest request, std::shared_ptr<ResponseChannel> channel) {
    if (request.path == "/echo") {
      channel->Send(200, "text/plain", request.method + " " + request.body,
                    {{"X-Header", std::string(request.Header("X-Test"))}});
    } else if (request.path == "/stream") {
      channel->BeginStream(200, "text/event-stream");
      for (int i = 0; i < 3; ++i) channel->Write("data: " + std::to_string(i) + "\n\n");
      channel->End();
    } else if (request.path == "/hang") {
      // Never answers until the client goes away.
      channel->OnDisconnect([this, channel] { disconnects_.fetch_add(1); });
      hanging_ = channel;
    } else if (request.path == "/drop") {
      // Channel dropped without an answer: the core answers 500.
    } else {
      channel->Send(404, "text/plain", "nope");
    }
  }

  std::unique_ptr<HttpServer> server_;
  std::atomic<int> disconnects_{0};
  std::shared_ptr<ResponseChannel> hanging_;
};

TEST_F(HttpServerTest, AnswersAndKeepsTheConnectionAlive) {
  StartServer();
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.connected());
  for (int i = 0; i < 3; ++i) {
    const std::string body = "hello" + std::to_string(i);
    ASSERT_TRUE(connection.Send("POST /echo HTTP/1.1\r\nHost: x\r\nX-Test: v\r\nContent-Length: " +
                                std::to_string(body.size()) + "\r\n\r\n" + body));
    auto response = connection.ReadResponse();
    ASSERT_TRUE(response.has_value());
    EXPECT_EQ(response->status, 200);
    EXPECT_EQ(response->body, "POST " + body);
    EXPECT_EQ(response->headers["x-header"], "v");
    EXPECT_EQ(response->headers["connection"], "keep-alive");
  }
}

TEST_F(HttpServerTest, PipelinedRequestsAreAnsweredInOrder) {
  StartServer();
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send(
      "POST /echo HTTP/1.1\r\nContent-Length: 1\r\n\r\naPOST /echo HTTP/1.1\r\nContent-Length: "
      "1\r\n\r\nb"));
  auto first = connection.ReadResponse();
  auto second = connection.ReadResponse();
  ASSERT_TRUE(first && second);
  EXPECT_EQ(first->body, "POST a");
  EXPECT_EQ(second->body, "POST b");
}

TEST_F(HttpServerTest, StreamsChunkedEvents) {
  StartServer();
  auto response = Request(server_->port(), "GET", "/stream");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 200);
  EXPECT_EQ(response->headers["content-type"], "text/event-stream");
  EXPECT_EQ(response->headers["transfer-encoding"], "chunked");
  EXPECT_EQ(response->body, "data: 0\n\ndata: 1\n\ndata: 2\n\n");
}

TEST_F(HttpServerTest, RejectsOversizedBodyBeforeReadingIt) {
  HttpServerOptions options;
  options.max_body_bytes = 100;
  StartServer(options);
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("POST /echo HTTP/1.1\r\nContent-Length: 101\r\n\r\n"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 413);
  EXPECT_NE(response->body.find("exceeds the limit of 100"), std::string::npos);
  EXPECT_TRUE(connection.WaitClosed());
}

TEST_F(HttpServerTest, OversizedBodyIsAnsweredEvenWhileTheClientKeepsSending) {
  HttpServerOptions options;
  options.max_body_bytes = 1000;
  StartServer(options);
  RawConnection connection(server_->port());
  const std::string body(2 << 20, 'x');  // 2 MiB: more than the socket buffers hold
  ASSERT_TRUE(connection.Send(
      "POST /echo HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n"));
  connection.Send(body);  // the server discards it after answering
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 413);
}

TEST_F(HttpServerTest, RejectsOversizedChunkedBody) {
  HttpServerOptions options;
  options.max_body_bytes = 10;
  StartServer(options);
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send(
      "POST /echo HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n8\r\n12345678\r\n8\r\n12345678\r\n"
      "0\r\n\r\n"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 413);
}

TEST_F(HttpServerTest, SlowHeaderGets408) {
  HttpServerOptions options;
  options.header_timeout = std::chrono::milliseconds(200);
  StartServer(options);
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("POST /echo HTTP/1.1\r\nContent-Le"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 408);
  EXPECT_TRUE(connection.WaitClosed());
}

TEST_F(HttpServerTest, SlowBodyGets408) {
  HttpServerOptions options;
  options.body_timeout = std::chrono::milliseconds(200);
  StartServer(options);
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("POST /echo HTTP/1.1\r\nContent-Length: 10\r\n\r\n12345"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 408);
  EXPECT_NE(response->body.find("timed out reading the body"), std::string::npos);
}

TEST_F(HttpServerTest, IdleConnectionIsClosedSilently) {
  HttpServerOptions options;
  options.header_timeout = std::chrono::milliseconds(200);
  StartServer(options);
  RawConnection connection(server_->port());
  EXPECT_TRUE(connection.WaitClosed());
}

TEST_F(HttpServerTest, MalformedRequestGets400) {
  StartServer();
  RawConnection connection(server_->port());
  ASSERT_TRUE(connection.Send("THIS IS NOT HTTP\r\n\r\n"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 400);
}

TEST_F(HttpServerTest, HugeHeaderGets431) {
  HttpServerOptions options;
  options.max_header_bytes = 1024;
  StartServer(options);
  RawConnection connection(server_->port());
  ASSERT_TRUE(
      connection.Send("GET /echo HTTP/1.1\r\nX-Big: " + std::string(4000, 'a') + "\r\n\r\n"));
  auto response = connection.ReadResponse();
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 431);
}

TEST_F(HttpServerTest, ClientDisconnectRunsTheCallback) {
  StartServer();
  {
    RawConnection connection(server_->port());
    ASSERT_TRUE(connection.Send("GET /hang HTTP/1.1\r\n\r\n"));
    for (int i = 0; i < 200 && !hanging_; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }  // closes the socket
  for (int i = 0; i < 400 && disconnects_.load() == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(disconnects_.load(), 1);
  ASSERT_TRUE(hanging_);
  EXPECT_TRUE(hanging_->disconnected());
  hanging_->Send(200, "text/plain", "too late");  // ignored, must not crash
}

TEST_F(HttpServerTest, DroppedChannelAnswers500) {
  StartServer();
  auto response = Request(server_->port(), "GET", "/drop");
  ASSERT_TRUE(response.has_value());
  EXPECT_EQ(response->status, 500);
}

TEST_F(HttpServerTest, StopAcceptingRefusesNewConnections) {
  StartServer();
  server_->StopAccepting();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  RawConnection connection(server_->port(), std::chrono::milliseconds(500));
  EXPECT_FALSE(connection.connected() && connection.Send("GET /echo HTTP/1.1\r\n\r\n") &&
               connection.ReadResponse().has_value());
}

TEST(Utf8Test, ValidatesSequences) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("\xE4\xBD\xA0\xE5\xA5\xBD"));  // 你好
  EXPECT_TRUE(IsValidUtf8("\xF0\x9F\x98\x80"));          // U+1F600
  EXPECT_FALSE(IsValidUtf8("\xFF"));                     // never valid
  EXPECT_FALSE(IsValidUtf8("\xC3"));                     // truncated
  EXPECT_FALSE(IsValidUtf8("\xC0\xAF"));                 // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xED\xA0\x80"));             // surrogate D800
  EXPECT_FALSE(IsValidUtf8("\xF4\x90\x80\x80"));         // > U+10FFFF
  EXPECT_FALSE(IsValidUtf8("ok\x80"));                   // stray continuation
}

}  // namespace
}  // namespace deepinfer::server

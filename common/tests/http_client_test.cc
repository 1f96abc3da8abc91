// HttpGet and HttpPost (Beast) against a raw socket server on loopback that answers one
// connection with canned bytes, or with nothing: what is sent, what is read back, and a clear
// error for every way an answer goes wrong (none, too slow, too big, not HTTP).
#include "trainscope/common/http_client.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <thread>

namespace trainscope {
namespace {

// Listens on a free loopback port; the first connection's request is read (headers and a
// Content-Length body), kept, and answered with `answer` ("" with `silent`: held open unanswered
// until the test ends), then closed.
class OneShotServer {
 public:
  explicit OneShotServer(std::string answer, bool silent = false)
      : answer_(std::move(answer)), silent_(silent) {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), len) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      ADD_FAILURE() << "cannot listen on loopback";
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { Serve(); });
  }
  ~OneShotServer() {
    done_ = true;
    shutdown(fd_, SHUT_RDWR);
    thread_.join();
    close(fd_);
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string request() {
    thread_.join();
    thread_ = std::thread([] {});
    return request_;
  }

 private:
  void Serve() {
    const int conn = accept(fd_, nullptr, nullptr);
    if (conn < 0) return;
    char buf[4096];
    while (request_.find("\r\n\r\n") == std::string::npos || !BodyRead()) {
      const ssize_t n = read(conn, buf, sizeof(buf));
      if (n <= 0) break;
      request_.append(buf, static_cast<size_t>(n));
    }
    if (silent_) {
      while (!done_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    } else {
      (void)!write(conn, answer_.data(), answer_.size());
    }
    close(conn);
  }
  bool BodyRead() const {
    const size_t at = request_.find("Content-Length: ");
    if (at == std::string::npos) return true;
    const size_t length = std::stoul(request_.substr(at + 16));
    return request_.size() >= request_.find("\r\n\r\n") + 4 + length;
  }

  const std::string answer_;
  const bool silent_;
  int fd_ = -1;
  int port_ = 0;
  std::string request_;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

TEST(HttpClient, GetSendsTheHeadersAndReadsStatusBodyAndHeaders) {
  OneShotServer server("HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\nX-Thing: a b\r\n\r\nnope");
  auto r = HttpGet(server.address(), "/api/v1/tasks?task=ps%3A0", 3000, 1 << 20, {},
                   {"Authorization: Bearer abc"});
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->status, 404);  // Any status is an answer.
  EXPECT_EQ(r->body, "nope");
  EXPECT_EQ(r->headers["x-thing"], "a b");
  const std::string sent = server.request();
  EXPECT_EQ(sent.rfind("GET /api/v1/tasks?task=ps%3A0 HTTP/1.1\r\n", 0), 0u) << sent;
  EXPECT_NE(sent.find("Authorization: Bearer abc\r\n"), std::string::npos) << sent;
  EXPECT_NE(sent.find("Host: " + server.address() + "\r\n"), std::string::npos) << sent;
}

TEST(HttpClient, PostSendsTheBodyAndItsType) {
  OneShotServer server("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
  auto r = HttpPost(server.address(), "/api/v2/alerts", "application/json", "[{\"a\":1}]");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "ok");
  const std::string sent = server.request();
  EXPECT_EQ(sent.rfind("POST /api/v2/alerts HTTP/1.1\r\n", 0), 0u) << sent;
  EXPECT_NE(sent.find("Content-Type: application/json\r\n"), std::string::npos) << sent;
  EXPECT_NE(sent.find("\r\n\r\n[{\"a\":1}]"), std::string::npos) << sent;
}

TEST(HttpClient, ABodyEndedByCloseIsReadWhole) {
  OneShotServer server("HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it");
  auto r = HttpGet(server.address(), "/");
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->body, "all of it");
}

TEST(HttpClient, EveryBadAnswerIsAClearError) {
  struct Case {
    std::string answer;
    absl::StatusCode code;
    std::string says;
  };
  const Case cases[] = {
      {"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + std::string(2000, 'x'),
       absl::StatusCode::kInvalidArgument, "sent more than 100 bytes"},
      {"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + std::string(2000, 'x'),
       absl::StatusCode::kInvalidArgument, "sent more than 100 bytes"},
      {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n7d0\r\n" + std::string(2000, 'x') +
           "\r\n0\r\n\r\n",
       absl::StatusCode::kInvalidArgument, "sent more than 100 bytes"},
      {"SSH-2.0-OpenSSH_9.2\r\n\r\n", absl::StatusCode::kInvalidArgument, "did not answer in HTTP"},
      {"", absl::StatusCode::kInvalidArgument, "did not answer in HTTP"},
  };
  for (const Case& c : cases) {
    OneShotServer server(c.answer);
    auto r = HttpGet(server.address(), "/x", 3000, 100);
    ASSERT_FALSE(r.ok()) << c.answer.substr(0, 40);
    EXPECT_EQ(r.status().code(), c.code) << r.status();
    EXPECT_NE(r.status().message().find(c.says), std::string::npos) << r.status();
    EXPECT_NE(r.status().message().find("http://" + server.address() + "/x"), std::string::npos)
        << r.status();
  }
}

TEST(HttpClient, ASilentServerMeetsTheDeadline) {
  OneShotServer server("", /*silent=*/true);
  auto r = HttpGet(server.address(), "/slow", 300);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDeadlineExceeded) << r.status();
  EXPECT_NE(r.status().message().find("did not answer within 300 ms"), std::string::npos)
      << r.status();
}

TEST(HttpClient, NothingListeningOrABadAddressIsSaid) {
  int port = 0;
  {
    OneShotServer gone("HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    port = std::stoi(gone.address().substr(10));
    (void)HttpGet(gone.address(), "/");
  }
  auto r = HttpGet("127.0.0.1:" + std::to_string(port), "/");
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
  EXPECT_NE(r.status().message().find("cannot reach http://127.0.0.1:"), std::string::npos)
      << r.status();
  EXPECT_EQ(HttpGet("no port here", "/").status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace trainscope

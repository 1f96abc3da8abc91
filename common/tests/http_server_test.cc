// The HTTP server over real loopback sockets: requests and keep-alive, the whole-request
// deadline against a trickle, the per-address and total caps, and idle connections closed
// first when full.
#include "trainscope/common/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>

namespace trainscope {
namespace {

using std::chrono::milliseconds;

std::unique_ptr<HttpServer> Serve(const HttpServerOptions& options = HttpServerOptions()) {
  auto server = HttpServer::Start(
      {"127.0.0.1"}, 0,
      [](const HttpServer::Request& r) {
        return HttpServer::Response{200, "text/plain", "path=" + r.path + " query=" + r.query};
      },
      nullptr, options);
  EXPECT_TRUE(server.ok()) << server.status();
  return server.ok() ? std::move(*server) : nullptr;
}

// A connection from 127.0.0.`source` to the server; -1 when it cannot connect.
int Connect(int port, int source = 1) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in from{};
  from.sin_family = AF_INET;
  from.sin_addr.s_addr = htonl(INADDR_LOOPBACK - 1 + static_cast<uint32_t>(source));
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  to.sin_port = htons(static_cast<uint16_t>(port));
  if (bind(fd, reinterpret_cast<sockaddr*>(&from), sizeof(from)) != 0 ||
      connect(fd, reinterpret_cast<sockaddr*>(&to), sizeof(to)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

void Send(int fd, const std::string& data) {
  ASSERT_EQ(send(fd, data.data(), data.size(), MSG_NOSIGNAL), static_cast<ssize_t>(data.size()));
}

// What arrives within `wait` (until the peer closes, or until `until` was seen).
std::string Receive(int fd, milliseconds wait, const std::string& until = "") {
  std::string got;
  const auto end = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    const ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
    if (!until.empty() && got.find(until) != std::string::npos) break;
  }
  return got;
}

// Whether the server closed `fd` within `wait`.
bool ClosedWithin(int fd, milliseconds wait) {
  const auto end = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < end) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 50) <= 0) continue;
    char buf[4096];
    if (recv(fd, buf, sizeof(buf), 0) <= 0) return true;
  }
  return false;
}

TEST(HttpServer, AnswersGetHeadAndRefusesOtherMethods) {
  auto server = Serve();
  ASSERT_TRUE(server);
  int fd = Connect(server->port());
  Send(fd, "GET /a%20b?x=%41 HTTP/1.0\r\n\r\n");
  std::string got = Receive(fd, milliseconds(2000));
  close(fd);
  EXPECT_NE(got.find("HTTP/1.0 200 OK"), std::string::npos) << got;
  EXPECT_NE(got.find("path=/a b query=x=%41"), std::string::npos) << got;
  EXPECT_EQ(got.find("Connection: keep-alive"), std::string::npos) << got;

  fd = Connect(server->port());
  Send(fd, "HEAD /h HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  got = Receive(fd, milliseconds(2000));
  close(fd);
  EXPECT_NE(got.find("Content-Length: 14"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  EXPECT_EQ(got.find("path="), std::string::npos) << got;

  fd = Connect(server->port());
  Send(fd, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nhi");
  got = Receive(fd, milliseconds(2000));
  close(fd);
  EXPECT_NE(got.find("405"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
}

TEST(HttpServer, KeepsAliveAndSaysWhenItCloses) {
  auto server = Serve();
  ASSERT_TRUE(server);
  int fd = Connect(server->port());
  Send(fd, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string got = Receive(fd, milliseconds(2000), "path=/1 query=");
  EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
  EXPECT_EQ(got.find("Connection: close"), std::string::npos) << got;
  Send(fd, "GET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  got = Receive(fd, milliseconds(2000));
  EXPECT_NE(got.find("path=/2"), std::string::npos) << got;
  EXPECT_NE(got.find("Connection: close"), std::string::npos) << got;
  close(fd);
}

TEST(HttpServer, OversizedHeadersAre431) {
  auto server = Serve();
  ASSERT_TRUE(server);
  int fd = Connect(server->port());
  Send(fd, "GET / HTTP/1.1\r\nX-Big: " + std::string(17000, 'a') + "\r\n\r\n");
  std::string got = Receive(fd, milliseconds(2000));
  close(fd);
  EXPECT_NE(got.find("431"), std::string::npos) << got.substr(0, 200);
}

// A client that sends a byte every 100 ms never finishes its request: the deadline is for the
// whole request, so the server closes it though every read got something.
TEST(HttpServer, ATrickleDoesNotExtendTheRequestDeadline) {
  HttpServerOptions o;
  o.request_timeout_ms = 1000;
  auto server = Serve(o);
  ASSERT_TRUE(server);
  int fd = Connect(server->port());
  Send(fd, "GET / HTTP/1.1\r\nX-Slow: ");
  bool closed = false;
  const auto start = std::chrono::steady_clock::now();
  while (!closed && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    closed = send(fd, "x", 1, MSG_NOSIGNAL) != 1 || ClosedWithin(fd, milliseconds(100));
  }
  close(fd);
  EXPECT_TRUE(closed) << "a trickling request was held for 20 s";
}

TEST(HttpServer, CapsConnectionsPerAddressAndClosesIdleOnesFirst) {
  HttpServerOptions o;
  o.max_connections = 3;
  o.max_connections_per_address = 2;
  auto server = Serve(o);
  ASSERT_TRUE(server);
  // Two slow ones from 127.0.0.2: a third from there takes the place of its oldest.
  int a = Connect(server->port(), 2);
  int b = Connect(server->port(), 2);
  std::this_thread::sleep_for(milliseconds(50));
  int c = Connect(server->port(), 2);
  EXPECT_TRUE(ClosedWithin(a, milliseconds(2000)));
  // An idle keep-alive connection from 127.0.0.3 fills the server.
  int idle = Connect(server->port(), 3);
  Send(idle, "GET /i HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(Receive(idle, milliseconds(2000), "path=/i query=").find("200"), std::string::npos);
  // Full: a newcomer from 127.0.0.4 gets the idle one's place and is served.
  int fresh = Connect(server->port(), 4);
  Send(fresh, "GET /f HTTP/1.0\r\n\r\n");
  EXPECT_NE(Receive(fresh, milliseconds(2000)).find("path=/f"), std::string::npos);
  EXPECT_TRUE(ClosedWithin(idle, milliseconds(2000)));
  close(fresh);
  std::this_thread::sleep_for(milliseconds(1500));  // Its lingering close is over.
  // Full of slow requests (b, c and one from 127.0.0.5): a newcomer from an address holding
  // fewer takes the place of the oldest slow request of the address holding the most.
  int held = Connect(server->port(), 5);
  int probe = Connect(server->port(), 6);
  Send(probe, "GET /p HTTP/1.0\r\n\r\n");
  EXPECT_NE(Receive(probe, milliseconds(2000)).find("path=/p"), std::string::npos);
  EXPECT_TRUE(ClosedWithin(b, milliseconds(2000)));
  for (int fd : {a, b, c, idle, held, probe}) close(fd);
}

TEST(HttpServer, FullOfTheNewcomersPeersItSays503) {
  HttpServerOptions o;
  o.max_connections = 2;
  auto server = Serve(o);
  ASSERT_TRUE(server);
  int a = Connect(server->port(), 2);
  int b = Connect(server->port(), 3);
  std::this_thread::sleep_for(milliseconds(50));
  int c = Connect(server->port(), 3);
  const std::string refused = Receive(c, milliseconds(2000));
  EXPECT_NE(refused.find("503 Service Unavailable"), std::string::npos) << refused;
  EXPECT_NE(refused.find("Connection: close"), std::string::npos) << refused;
  for (int fd : {a, b, c}) close(fd);
}

TEST(HttpServer, NamesTheAddressItCannotBind) {
  auto first = Serve();
  ASSERT_TRUE(first);
  auto second = HttpServer::Start({"127.0.0.1"}, first->port(), [](const HttpServer::Request&) {
    return HttpServer::Response{};
  });
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(first->port())),
            std::string::npos)
      << second.status();
}

}  // namespace
}  // namespace trainscope

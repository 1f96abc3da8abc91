// A small blocking HTTP/1.0 client; see http_client.h.
#include "trainscope/sidecar/http_client.h"

#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope::sidecar {
namespace {

class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }

 private:
  int fd_;
};

int RemainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() < 0 ? 0 : static_cast<int>(left.count());
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms, size_t max_bytes) {
  auto hp = ParseHostPort(host_port);
  if (!hp.ok()) return hp.status();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  std::string port = std::to_string(hp->port);
  if (int rc = getaddrinfo(hp->host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve ", hp->host, ": ", gai_strerror(rc)));
  }
  std::string last_error = "no address";
  int fd = -1;
  for (addrinfo* r = res; r != nullptr; r = r->ai_next) {
    int s = socket(r->ai_family, r->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, r->ai_protocol);
    if (s < 0) continue;
    int rc = connect(s, r->ai_addr, r->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{s, POLLOUT, 0};
      rc = poll(&p, 1, RemainingMs(deadline));
      if (rc == 1) {
        int err = 0;
        socklen_t len = sizeof(err);
        getsockopt(s, SOL_SOCKET, SO_ERROR, &err, &len);
        rc = err == 0 ? 0 : -1;
        errno = err;
      } else {
        rc = -1;
        errno = ETIMEDOUT;
      }
    }
    if (rc == 0) {
      fd = s;
      break;
    }
    last_error = std::strerror(errno);
    close(s);
  }
  freeaddrinfo(res);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", host_port, ": ", last_error));
  }
  Fd guard(fd);
  std::string request =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: ", host_port, "\r\nConnection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    pollfd p{fd, POLLOUT, 0};
    if (poll(&p, 1, RemainingMs(deadline)) != 1) {
      return absl::DeadlineExceededError(absl::StrCat("timeout sending to ", host_port));
    }
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("send to ", host_port, " failed: ", std::strerror(errno)));
    }
    sent += static_cast<size_t>(n);
  }
  std::string data;
  char buf[16384];
  while (true) {
    pollfd p{fd, POLLIN, 0};
    int rc = poll(&p, 1, RemainingMs(deadline));
    if (rc != 1) {
      return absl::DeadlineExceededError(
          absl::StrCat(host_port, path, " did not answer within ", timeout_ms, " ms"));
    }
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return absl::UnavailableError(
          absl::StrCat("read from ", host_port, " failed: ", std::strerror(errno)));
    }
    if (n == 0) break;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > max_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(host_port, path, " sent more than ", max_bytes, " bytes"));
    }
  }
  // "HTTP/1.x NNN ...\r\n...\r\n\r\nbody"
  if (data.rfind("HTTP/", 0) != 0 || data.size() < 12) {
    return absl::InvalidArgumentError(absl::StrCat(host_port, " did not answer in HTTP"));
  }
  HttpResponse out;
  if (!absl::SimpleAtoi(data.substr(9, 3), &out.status)) {
    return absl::InvalidArgumentError(absl::StrCat(host_port, " sent a bad HTTP status line"));
  }
  size_t body = data.find("\r\n\r\n");
  if (body == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(host_port, " sent no complete HTTP header"));
  }
  out.body = data.substr(body + 4);
  return out;
}

}  // namespace trainscope::sidecar

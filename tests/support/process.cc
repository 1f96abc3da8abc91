// Child-process control for integration tests; see process.h.
#include "process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <thread>

namespace trainscope::testing {

std::string BinPath(const std::string& name) {
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("readlink /proc/self/exe failed");
  std::string self(buf, n);
  return self.substr(0, self.rfind('/')) + "/" + name;
}

namespace {

// The kernel's range for ports it picks by itself (bind to port 0, and the source port of every
// outgoing connection): "32768 60999" on Debian.
int EphemeralLow() {
  std::ifstream in("/proc/sys/net/ipv4/ip_local_port_range");
  int low = 32768;
  in >> low;
  return low;
}

// True if 127.0.0.1:port can be bound now (nothing listens on it or holds it).
bool CanBind(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));  // As the servers bind.
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

}  // namespace

// Ports below the kernel's ephemeral range: a port handed out here and not yet bound by its
// program cannot be taken meanwhile by an outgoing connection or another program's port 0,
// which is how two CI runs failed ("Address already in use", and a task's gRPC port held by
// another task's metrics server). Each test process walks its own stretch of the range (from
// its pid), so two tests running side by side rarely meet; CanBind skips what another holds.
std::pair<std::string, int> Shell(const std::string& command) {
  std::string out;
  FILE* p = popen(command.c_str(), "r");
  if (p == nullptr) return {"", -1};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  return {out, pclose(p)};
}

int FreePort() {
  static std::mutex mu;
  static std::set<int> given;
  static int next = 0;
  std::lock_guard lock(mu);
  constexpr int kLowest = 10000;
  const int top = EphemeralLow();  // Exclusive.
  if (top - kLowest < 1000) throw std::runtime_error("the ephemeral port range leaves no room");
  const int span = top - kLowest;
  if (next == 0) next = kLowest + static_cast<int>((getpid() * 2654435761u) % span);
  for (int attempt = 0; attempt < span; ++attempt) {
    const int port = next;
    next = next + 1 < top ? next + 1 : kLowest;
    if (given.count(port) == 0 && CanBind(port)) {
      given.insert(port);
      return port;
    }
  }
  throw std::runtime_error("no free port below the ephemeral range");
}

Process::Process(std::string binary, std::vector<std::string> args,
                 std::map<std::string, std::string> env) {
  char tmpl[] = "/tmp/trainscope-test-XXXXXX";
  int log_fd = mkstemp(tmpl);
  if (log_fd < 0) throw std::runtime_error("mkstemp failed");
  log_path_ = tmpl;
  pid_ = fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {
    dup2(log_fd, 1);
    dup2(log_fd, 2);
    close(log_fd);
    for (const auto& [k, v] : env) setenv(k.c_str(), v.c_str(), 1);
    std::vector<char*> argv;
    argv.push_back(binary.data());
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  close(log_fd);
}

Process::~Process() {
  if (Running()) {
    kill(pid_, SIGKILL);
    Wait(std::chrono::seconds(5));
  }
  if (std::getenv("TRAINSCOPE_KEEP_TEST_LOGS") == nullptr) unlink(log_path_.c_str());
}

std::string Process::Output() const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool Process::WaitForOutput(const std::string& needle, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (Output().find(needle) != std::string::npos) return true;
    if (!Running()) return Output().find(needle) != std::string::npos;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

std::optional<int> Process::Wait(std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!exit_code_) {
    int status = 0;
    pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) return std::nullopt;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return exit_code_;
}

bool Process::Running() { return !Wait(std::chrono::milliseconds(0)).has_value(); }

void Process::Signal(int sig) {
  if (Running()) kill(pid_, sig);
}

std::string TfConfig(const std::map<std::string, std::vector<std::string>>& cluster,
                     const std::string& role, int index) {
  std::string out = "{\"cluster\": {";
  bool first_job = true;
  for (const auto& [job, addrs] : cluster) {
    if (!first_job) out += ", ";
    first_job = false;
    out += "\"" + job + "\": [";
    for (size_t i = 0; i < addrs.size(); ++i) {
      if (i) out += ", ";
      out += "\"" + addrs[i] + "\"";
    }
    out += "]";
  }
  out += "}, \"task\": {\"type\": \"" + role + "\", \"index\": " + std::to_string(index) + "}}";
  return out;
}

}  // namespace trainscope::testing

namespace trainscope::testing {

std::optional<std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                   std::chrono::milliseconds timeout) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return std::nullopt;
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1 ||
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request =
      "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\nConnection: close\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string response;
  char buf[65536];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  close(fd);
  const size_t header_end = response.find("\r\n\r\n");
  if (header_end == std::string::npos) return std::nullopt;
  const size_t space = response.find(' ');
  if (space == std::string::npos || response.compare(space + 1, 3, "200") != 0) {
    return std::nullopt;
  }
  return response.substr(header_end + 4);
}

}  // namespace trainscope::testing

namespace trainscope::testing {

ListeningSocket::ListeningSocket(int port) {
  fd_ = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || listen(fd_, 1) != 0) {
    close(fd_);
    fd_ = -1;
  }
}

ListeningSocket::~ListeningSocket() {
  if (fd_ >= 0) close(fd_);
}

}  // namespace trainscope::testing

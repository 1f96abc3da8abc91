// civetweb-based HTTP server; see http_server.h.
#include "trainscope/common/http_server.h"

#include <civetweb.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/http_tls.h"

namespace trainscope {
namespace {

std::mutex g_log_mu;
std::string* g_last_log = nullptr;

int LogMessage(const ::mg_connection*, const char* message) {
  std::lock_guard<std::mutex> lock(g_log_mu);
  if (g_last_log != nullptr) *g_last_log = message;
  return 1;  // Handled: keep civetweb quiet.
}

}  // namespace

int HttpServer::Dispatch(::mg_connection* conn, void* self_ptr) {
  auto* self = static_cast<HttpServer*>(self_ptr);
  const mg_request_info* info = mg_get_request_info(conn);
  Request req;
  req.path = info->local_uri ? info->local_uri : "/";
  req.query = info->query_string ? info->query_string : "";
  Response resp;
  if (std::strcmp(info->request_method, "GET") != 0 &&
      std::strcmp(info->request_method, "HEAD") != 0) {
    resp = {405, "text/plain; charset=utf-8", "only GET\n"};
  } else {
    try {
      resp = self->handler_(req);
    } catch (const std::exception& e) {
      resp = {500, "text/plain; charset=utf-8", absl::StrCat("internal error: ", e.what(), "\n")};
    }
  }
  const char* reason = resp.status == 200   ? "OK"
                       : resp.status == 404 ? "Not Found"
                       : resp.status == 503 ? "Service Unavailable"
                                            : "Error";
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            resp.status, reason, resp.content_type.c_str(), resp.body.size());
  if (std::strcmp(info->request_method, "HEAD") != 0) {
    mg_write(conn, resp.body.data(), resp.body.size());
  }
  return resp.status;
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::vector<std::string>& addresses, int port, Handler handler, HttpTls* tls) {
  static std::once_flag init;
  std::call_once(init, [] { mg_init_library(0); });
  std::unique_ptr<HttpServer> server(new HttpServer);
  server->handler_ = std::move(handler);
  server->address_ = addresses.empty() ? "0.0.0.0" : addresses.front();
  std::vector<std::string> listen;
  for (const std::string& a : addresses) listen.push_back(CivetwebPort(a, port, tls != nullptr));
  std::string ports = absl::StrJoin(listen, ",");
  // Bounded: a request line and headers of 16 KiB at most (civetweb also caps the header count
  // at 64), 3 s for each read or write. civetweb gives each connection a thread while it reads
  // the request, so clients that trickle theirs a byte at a time hold one each: 16 threads keep
  // the page and the API answering through a handful of them (the test holds 8). Beyond the
  // threads, 64 accepted connections wait in civetweb's queue and 64 in the kernel's backlog;
  // more are refused by the kernel, not held in memory.
  const char* options[] = {"listening_ports",
                           ports.c_str(),
                           "num_threads",
                           "16",
                           "connection_queue",
                           "64",
                           "listen_backlog",
                           "64",
                           "request_timeout_ms",
                           "3000",
                           "max_request_size",
                           "16384",
                           "enable_keep_alive",
                           "no",
                           nullptr};
  mg_callbacks callbacks{};
  callbacks.log_message = LogMessage;
  callbacks.init_ssl = HttpTlsInitSsl;
  ScopedHttpTls scoped_tls(tls);
  std::string last_log;
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    g_last_log = &last_log;
  }
  server->ctx_ = mg_start(&callbacks, nullptr, options);
  {
    std::lock_guard<std::mutex> lock(g_log_mu);
    g_last_log = nullptr;
  }
  if (server->ctx_ == nullptr) {
    return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", ports,
                                               " (port in use? pick another --http_port)",
                                               last_log.empty() ? "" : ": " + last_log));
  }
  mg_set_request_handler(server->ctx_, "/", &HttpServer::Dispatch, server.get());
  mg_server_port ports_out[4];
  int n = mg_get_server_ports(server->ctx_, 4, ports_out);
  server->port_ = n > 0 ? ports_out[0].port : port;
  return server;
}

HttpServer::~HttpServer() {
  if (ctx_ == nullptr) return;
  // mg_stop waits until civetweb's listening thread sees the stop flag, which it checks only
  // when its poll returns (up to a second later). Connecting to our own port makes it return.
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    mg_stop(ctx_);
    stopped.store(true);
  });
  const std::string host = address_.empty() || address_ == "0.0.0.0" ? "127.0.0.1" : address_;
  for (int i = 0; i < 100 && !stopped.load(); ++i) {
    addrinfo hints{};
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* res = nullptr;
    if (getaddrinfo(host.c_str(), std::to_string(port_).c_str(), &hints, &res) == 0 && res) {
      int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (fd >= 0) {
        connect(fd, res->ai_addr, res->ai_addrlen);
        close(fd);
      }
      freeaddrinfo(res);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stopper.join();
}

}  // namespace trainscope

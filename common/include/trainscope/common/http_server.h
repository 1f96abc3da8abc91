#pragma once
// The one HTTP server of the project (the sidecar's page, API, SD and /metrics; every task's
// /metrics): one handler function for every GET and HEAD. Event-driven (Boost.Asio/Beast, one
// thread for every connection's I/O), so a slow client holds a few KiB, never a thread; the
// handler runs on a small pool so that a slow handler does not stall the I/O. Bounded: a
// deadline for the TLS handshake and one for the whole request (a trickle cannot extend it), a
// cap on connections in all and per client address. When full, idle keep-alive connections
// are closed first, then the oldest unfinished request of the address holding the most (at an
// address's own cap: its own oldest); docs/security.md, "HTTP listeners".
// Thread-safe: the handler is called from several pool threads at once, so it must be too.

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope {

class HttpTls;

// Limits of one HttpServer (docs/security.md, "HTTP listeners", says what they bound).
struct HttpServerOptions {
  // Connections held at once, in all and from one client address. A new connection beyond
  // either is answered 503 (HTTPS: closed) unless room is made for it (see the file comment).
  // A TLS connection may take some 200 KiB while it handshakes: the caps bound the memory.
  int max_connections = 256;
  int max_connections_per_address = 64;
  // From accept (or the first byte of a later request on a keep-alive connection) until the
  // request line, the headers and any body are read, whatever the pace of the bytes.
  int request_timeout_ms = 5000;
  // From accept until the TLS handshake is done (inside the request's deadline).
  int tls_handshake_timeout_ms = 3000;
  // A keep-alive connection waiting for its next request.
  int idle_timeout_ms = 30000;
  // Writing a response to a client that does not read it.
  int write_timeout_ms = 10000;
  // Request line and headers; a body (GET seldom has one).
  size_t max_header_bytes = 16384;
  size_t max_body_bytes = 4096;
  // Threads that run the handler.
  int handler_threads = 4;
  // Requests for these paths (exact) run on a pool of their own, so that slow handlers (a stack
  // capture, a fetch from another node) never hold the threads that answer the others. At most
  // slow_queue_limit wait for one of its slow_handler_threads; more are answered 503. One whose
  // client has left, or that waited slow_queue_timeout_ms, is dropped before it runs (503).
  std::vector<std::string> slow_paths;
  int slow_handler_threads = 2;
  int slow_queue_limit = 16;
  int slow_queue_timeout_ms = 10000;
};

class HttpServer {
 public:
  struct Request {
    std::string path;                 // Percent-decoded, without the query.
    std::string query;                // As sent (QueryParam-style decoding is the handler's).
    std::string authorization = {};   // The Authorization header as sent; "" when none.
    std::string client_address = {};  // The client's IP address.
    // Over mutual TLS: the client presented a certificate that the CA verified.
    bool client_certificate = false;
    // Set once the client has closed its connection (or the server stops): a handler that waits
    // for something may give up then. Null only in requests a test makes by hand.
    std::shared_ptr<const std::atomic<bool>> gone = {};
    bool Gone() const { return gone != nullptr && gone->load(); }
  };
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
    std::vector<std::pair<std::string, std::string>> headers = {};  // More header fields.
  };
  using Handler = std::function<Response(const Request&)>;

  // Listens on `port` of each of `addresses` (port 0: any free port, the same on every
  // address); HTTPS when `tls` is given (it must outlive the server). Unavailable, naming the
  // address, when one cannot be bound.
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::vector<std::string>& addresses, int port, Handler handler, HttpTls* tls = nullptr,
      const HttpServerOptions& options = HttpServerOptions());
  // Closes every connection and waits for handlers that run (queued ones are dropped).
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }

  class Impl;

 private:
  HttpServer() = default;

  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace trainscope

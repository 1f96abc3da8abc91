#pragma once
// A small HTTP server on civetweb: one handler function for every GET (the sidecar's page, API
// and /metrics).
// Thread-safe: civetweb calls the handler from its worker threads, so the handler must be too.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

struct mg_context;
namespace trainscope {
class HttpTls;
}
struct mg_connection;

namespace trainscope {

class HttpServer {
 public:
  struct Request {
    std::string path;
    std::string query;
  };
  struct Response {
    int status = 200;
    std::string content_type = "text/plain; charset=utf-8";
    std::string body;
  };
  using Handler = std::function<Response(const Request&)>;

  // Listens on port of each of `addresses` (port 0: any free port, one address only) with a
  // few worker threads; HTTPS when `tls` is given (it must outlive the server).
  static absl::StatusOr<std::unique_ptr<HttpServer>> Start(
      const std::vector<std::string>& addresses, int port, Handler handler, HttpTls* tls = nullptr);
  ~HttpServer();
  int port() const { return port_; }

 private:
  HttpServer() = default;
  static int Dispatch(::mg_connection* conn, void* self);

  mg_context* ctx_ = nullptr;
  Handler handler_;
  int port_ = 0;
  std::string address_;
};

}  // namespace trainscope

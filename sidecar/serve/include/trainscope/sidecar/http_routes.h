#pragma once
// The sidecar's HTTP API as a route table: exact paths and path prefixes, each with its handler,
// and the query-string helpers the handlers share. Private to the sidecar library.

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainscope/common/http_server.h"

namespace trainscope::sidecar {

class HttpRoutes {
 public:
  using Handler = std::function<HttpServer::Response(const HttpServer::Request&)>;
  // Adds a handler for exactly `path`.
  void Exact(std::string path, Handler handler);
  // Adds a handler for every path that starts with `prefix` (the longest prefix wins; exact
  // paths first).
  void Prefix(std::string prefix, Handler handler);
  // Serves one request: its route's answer, or 404 naming the paths there are.
  HttpServer::Response Serve(const HttpServer::Request& request) const;

 private:
  std::map<std::string, Handler> exact_;
  std::vector<std::pair<std::string, Handler>> prefixes_;  // Longest first.
};

// The value of `name` in a query string ("a=1&b=x%2Fy"), percent-decoded and cut to 512 bytes;
// "" when absent.
std::string QueryParam(std::string_view query, std::string_view name);

}  // namespace trainscope::sidecar

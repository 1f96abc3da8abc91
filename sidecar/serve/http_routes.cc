// The HTTP route table; see http_routes.h.
#include "serve/http_routes.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "civetweb.h"

namespace trainscope::sidecar {

void HttpRoutes::Exact(std::string path, Handler handler) {
  exact_[std::move(path)] = std::move(handler);
}

void HttpRoutes::Prefix(std::string prefix, Handler handler) {
  prefixes_.emplace_back(std::move(prefix), std::move(handler));
  std::stable_sort(prefixes_.begin(), prefixes_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

HttpServer::Response HttpRoutes::Serve(const HttpServer::Request& request) const {
  if (auto it = exact_.find(request.path); it != exact_.end()) return it->second(request);
  for (const auto& [prefix, handler] : prefixes_) {
    if (request.path.rfind(prefix, 0) == 0) return handler(request);
  }
  std::vector<std::string> paths;
  for (const auto& [path, handler] : exact_) paths.push_back(path);
  return {404, "text/plain; charset=utf-8",
          absl::StrCat("not found; paths here: ", absl::StrJoin(paths, " "), "\n")};
}

std::string QueryParam(std::string_view query, std::string_view name) {
  // civetweb's own decoding (percent escapes, '+' for a space); its buffer holds the whole
  // query, so no value is refused as too long, then the value is cut.
  const std::string q(query);
  const std::string n(name);
  std::vector<char> value(q.size() + 1);
  const int length = mg_get_var(q.data(), q.size(), n.c_str(), value.data(), value.size());
  if (length < 0) return "";
  return std::string(value.data(), std::min<size_t>(static_cast<size_t>(length), 512));
}

}  // namespace trainscope::sidecar

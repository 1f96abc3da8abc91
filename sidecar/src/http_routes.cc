// The HTTP route table; see http_routes.h.
#include "http_routes.h"

#include <algorithm>
#include <cctype>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace trainscope::sidecar {
namespace {

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

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
  for (absl::string_view part :
       absl::StrSplit(absl::string_view(query.data(), query.size()), '&')) {
    size_t eq = part.find('=');
    if (part.substr(0, eq) != absl::string_view(name.data(), name.size())) continue;
    if (eq == absl::string_view::npos) return "";
    std::string out;
    absl::string_view v = part.substr(eq + 1);
    for (size_t i = 0; i < v.size() && out.size() < 512; ++i) {
      if (v[i] == '+') {
        out.push_back(' ');
      } else if (v[i] == '%' && i + 2 < v.size() && HexValue(v[i + 1]) >= 0 &&
                 HexValue(v[i + 2]) >= 0) {
        out.push_back(static_cast<char>(HexValue(v[i + 1]) * 16 + HexValue(v[i + 2])));
        i += 2;
      } else {
        out.push_back(v[i]);
      }
    }
    return out;
  }
  return "";
}

}  // namespace trainscope::sidecar

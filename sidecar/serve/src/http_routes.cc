// The HTTP route table; see http_routes.h.
#include "trainscope/sidecar/http_routes.h"

#include <algorithm>
#include <cctype>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "uriparser/Uri.h"

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
  // uriparser's decoding (percent escapes, '+' for a space); the first field of that name wins,
  // and its value is cut at 512 bytes.
  UriQueryListA* list = nullptr;
  if (uriDissectQueryMallocExA(&list, nullptr, query.data(), query.data() + query.size(), URI_TRUE,
                               URI_BR_DONT_TOUCH) != URI_SUCCESS) {
    return "";
  }
  std::string value;
  for (const UriQueryListA* field = list; field != nullptr; field = field->next) {
    if (field->key != nullptr && name == field->key) {
      if (field->value != nullptr) value = std::string(field->value).substr(0, 512);
      break;
    }
  }
  uriFreeQueryListA(list);
  return value;
}

}  // namespace trainscope::sidecar

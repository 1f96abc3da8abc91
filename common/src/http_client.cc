// HTTP GET and POST on libcurl; see http_client.h.
#include "trainscope/common/http_client.h"

#include <curl/curl.h>

#include <memory>
#include <mutex>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope {
namespace {

struct CurlDeleter {
  void operator()(CURL* curl) const { curl_easy_cleanup(curl); }
  void operator()(curl_slist* list) const { curl_slist_free_all(list); }
};

// The answer as it arrives, cut off (the transfer failing) past `max_bytes`.
struct Sink {
  std::string body;
  size_t max_bytes = 0;
  bool too_big = false;
  std::map<std::string, std::string> headers;
};

// One header line of the answer ("Name: value\r\n"); at most 64 fields are kept.
size_t AppendHeader(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  const absl::string_view line(data, n);
  const size_t colon = line.find(':');
  if (colon != absl::string_view::npos && sink->headers.size() < 64) {
    sink->headers[absl::AsciiStrToLower(line.substr(0, colon))] =
        std::string(absl::StripAsciiWhitespace(line.substr(colon + 1)));
  }
  return n;
}

size_t Append(char* data, size_t size, size_t count, void* user) {
  auto* sink = static_cast<Sink*>(user);
  const size_t n = size * count;
  if (sink->body.size() + n > sink->max_bytes) {
    sink->too_big = true;
    return 0;  // libcurl fails the transfer with CURLE_WRITE_ERROR.
  }
  sink->body.append(data, n);
  return n;
}

void SetTls(CURL* curl, const TlsFiles& tls) {
  if (!tls.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, tls.ca_file.c_str());
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);  // The chain, and the name (see .h).
  if (!tls.cert_file.empty()) {
    curl_easy_setopt(curl, CURLOPT_SSLCERT, tls.cert_file.c_str());
    curl_easy_setopt(curl, CURLOPT_SSLKEY,
                     (tls.key_file.empty() ? tls.cert_file : tls.key_file).c_str());
  }
}

// The failure of a transfer, in words naming the URL.
absl::Status TransferError(CURLcode code, const char* detail, const std::string& where,
                           int timeout_ms, const Sink& sink) {
  const std::string why = detail[0] != '\0' ? detail : curl_easy_strerror(code);
  if (sink.too_big) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, " sent more than ", sink.max_bytes, " bytes"));
  }
  switch (code) {
    case CURLE_PEER_FAILED_VERIFICATION:
      if (absl::StrContains(why, "name")) {
        return absl::UnavailableError(absl::StrCat(
            "refusing ", where, ": its TLS certificate does not name the host dialled (", why,
            "); dial a name or address in its subjectAltName, or add this one there"));
      }
      return absl::UnavailableError(
          absl::StrCat("refusing ", where, ": its TLS certificate does not verify (", why, ")"));
    case CURLE_OPERATION_TIMEDOUT:
      return absl::DeadlineExceededError(
          absl::StrCat(where, " did not answer within ", timeout_ms, " ms (", why, ")"));
    case CURLE_WEIRD_SERVER_REPLY:
    case CURLE_UNSUPPORTED_PROTOCOL:
    case CURLE_GOT_NOTHING:
      return absl::InvalidArgumentError(absl::StrCat(where, " did not answer in HTTP (", why, ")"));
    default:
      return absl::UnavailableError(absl::StrCat("cannot reach ", where, ": ", why));
  }
}

absl::StatusOr<HttpResponse> Exchange(const std::string& host_port, const std::string& path,
                                      const std::string* content_type, const std::string* body,
                                      int timeout_ms, size_t max_bytes, const TlsFiles& tls,
                                      const std::vector<std::string>& extra) {
  if (absl::Status s = ParseHostPort(host_port).status(); !s.ok()) return s;
  static std::once_flag init;
  std::call_once(init, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
  std::unique_ptr<CURL, CurlDeleter> curl(curl_easy_init());
  if (curl == nullptr) return absl::ResourceExhaustedError("cannot start an HTTP request");
  const std::string url = absl::StrCat(tls.enabled() ? "https://" : "http://", host_port, path);
  Sink sink;
  sink.max_bytes = max_bytes;
  char detail[CURL_ERROR_SIZE] = {};
  CURL* c = curl.get();
  curl_easy_setopt(c, CURLOPT_URL, url.c_str());
  curl_easy_setopt(c, CURLOPT_PROXY, "");  // Not $http_proxy: these are direct calls.
  curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, static_cast<long>(timeout_ms));
  curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, &Append);
  curl_easy_setopt(c, CURLOPT_WRITEDATA, &sink);
  curl_easy_setopt(c, CURLOPT_ERRORBUFFER, detail);
  curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, &AppendHeader);
  curl_easy_setopt(c, CURLOPT_HEADERDATA, &sink);
  if (tls.enabled()) SetTls(c, tls);
  std::unique_ptr<curl_slist, CurlDeleter> headers;
  auto add_header = [&](const std::string& line) {
    curl_slist* grown = curl_slist_append(headers.get(), line.c_str());
    if (grown != nullptr) {
      (void)headers.release();
      headers.reset(grown);
    }
  };
  for (const std::string& line : extra) add_header(line);
  if (body != nullptr) add_header(absl::StrCat("Content-Type: ", *content_type));
  if (headers != nullptr) curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers.get());
  if (body != nullptr) {
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body->data());
    curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body->size()));
  }
  const CURLcode code = curl_easy_perform(c);
  if (code != CURLE_OK) return TransferError(code, detail, url, timeout_ms, sink);
  long status = 0;
  curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
  return HttpResponse{static_cast<int>(status), std::move(sink.body), std::move(sink.headers)};
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms, size_t max_bytes, const TlsFiles& tls,
                                     const std::vector<std::string>& headers) {
  return Exchange(host_port, path, nullptr, nullptr, timeout_ms, max_bytes, tls, headers);
}

absl::StatusOr<HttpResponse> HttpPost(const std::string& host_port, const std::string& path,
                                      const std::string& content_type, const std::string& body,
                                      int timeout_ms, size_t max_bytes, const TlsFiles& tls) {
  return Exchange(host_port, path, &content_type, &body, timeout_ms, max_bytes, tls, {});
}

}  // namespace trainscope

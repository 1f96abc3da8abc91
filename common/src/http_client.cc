// HTTP GET and POST on Boost.Beast, the library the HTTP server already uses; see http_client.h.
// One exchange runs on its own io_context, which this thread runs up to the deadline; past it,
// the socket is closed and the steps still pending end before the context goes.
#include "trainscope/common/http_client.h"

#include <openssl/ssl.h>
#include <openssl/x509_vfy.h>

#include <boost/asio/connect.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/cluster_spec.h"

namespace trainscope {
namespace {

namespace asio = boost::asio;
namespace http = boost::beast::http;
using asio::ip::tcp;
using boost::system::error_code;

struct Request {
  HostPort to;
  std::string where;  // The URL, for messages.
  http::request<http::string_body> message;
  size_t max_bytes = 0;
  int timeout_ms = 0;
};

bool IsAddress(const std::string& host) {
  error_code ec;
  (void)asio::ip::make_address(host, ec);
  return !ec;
}

// The client side of TLS: the chain verified against tls.ca_file (else the system's CAs), the
// server's certificate required to name the host dialled, our certificate presented when set.
absl::Status SetUpTls(asio::ssl::context& ctx, const TlsFiles& tls) {
  error_code ec;
  ctx.set_verify_mode(asio::ssl::verify_peer, ec);
  if (!tls.ca_file.empty()) {
    ctx.load_verify_file(tls.ca_file, ec);
  } else {
    ctx.set_default_verify_paths(ec);
  }
  if (ec) return absl::InvalidArgumentError(absl::StrCat("cannot read the CA: ", ec.message()));
  if (!tls.cert_file.empty()) {
    ctx.use_certificate_chain_file(tls.cert_file, ec);
    if (!ec) {
      ctx.use_private_key_file(tls.key_file.empty() ? tls.cert_file : tls.key_file,
                               asio::ssl::context::pem, ec);
    }
    if (ec) {
      return absl::InvalidArgumentError(
          absl::StrCat("cannot read the client certificate or key: ", ec.message()));
    }
  }
  return absl::OkStatus();
}

// Asks OpenSSL to check the server's name: an IP subjectAltName for an address, else a DNS one.
void RequireName(SSL* ssl, const std::string& host) {
  X509_VERIFY_PARAM* param = SSL_get0_param(ssl);
  if (IsAddress(host)) {
    X509_VERIFY_PARAM_set1_ip_asc(param, host.c_str());
  } else {
    X509_VERIFY_PARAM_set1_host(param, host.c_str(), host.size());
    SSL_set_tlsext_host_name(ssl, host.c_str());
  }
}

absl::Status HandshakeError(SSL* ssl, const error_code& ec, const std::string& where) {
  const long verify = SSL_get_verify_result(ssl);
  if (verify == X509_V_ERR_HOSTNAME_MISMATCH || verify == X509_V_ERR_IP_ADDRESS_MISMATCH) {
    return absl::UnavailableError(
        absl::StrCat("refusing ", where, ": its TLS certificate does not name the host dialled (",
                     X509_verify_cert_error_string(verify),
                     "); dial a name or address in its subjectAltName, or add this one there"));
  }
  if (verify != X509_V_OK) {
    return absl::UnavailableError(absl::StrCat("refusing ", where,
                                               ": its TLS certificate does not verify (",
                                               X509_verify_cert_error_string(verify), ")"));
  }
  return absl::UnavailableError(
      absl::StrCat("cannot reach ", where, ": TLS handshake failed (", ec.message(), ")"));
}

absl::Status Unreachable(const error_code& ec, const Request& r) {
  return absl::UnavailableError(absl::StrCat("cannot reach ", r.where, ": ", ec.message()));
}

absl::Status ReadError(const error_code& ec, const Request& r) {
  if (ec == http::error::body_limit || ec == http::error::header_limit) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.where, " sent more than ", r.max_bytes, " bytes"));
  }
  if (ec.category() == http::make_error_code(http::error::body_limit).category() ||
      ec == asio::error::eof || ec == http::error::end_of_stream) {
    return absl::InvalidArgumentError(
        absl::StrCat(r.where, " did not answer in HTTP (", ec.message(), ")"));
  }
  return Unreachable(ec, r);
}

HttpResponse ToResponse(http::response<http::string_body>& answer) {
  HttpResponse out;
  out.status = static_cast<int>(answer.result_int());
  for (const auto& field : answer) {
    if (out.headers.size() >= 64) break;
    out.headers[absl::AsciiStrToLower(std::string(field.name_string()))] =
        std::string(field.value());
  }
  out.body = std::move(answer.body());
  return out;
}

// One exchange as a chain of asynchronous steps on the caller's io_context: resolve, connect,
// the TLS handshake, write, read the header, read the body. (Callbacks, not coroutines: clang
// 14, which builds the sanitizer trees, cannot compile Boost 1.74's awaitables.)
class Call {
 public:
  Call(asio::io_context& io, Request& r, asio::ssl::context* ctx)
      : r_(r), resolver_(io), socket_(io) {
    if (ctx != nullptr) tls_.emplace(socket_, *ctx);
    parser_.body_limit(r.max_bytes);
    parser_.header_limit(64 * 1024);
  }

  void Start() {
    resolver_.async_resolve(r_.to.host, std::to_string(r_.to.port),
                            [this](error_code ec, const tcp::resolver::results_type& endpoints) {
                              if (ec) return Fail(Unreachable(ec, r_));
                              asio::async_connect(
                                  socket_, endpoints,
                                  [this](error_code e, const tcp::endpoint&) { Connected(e); });
                            });
  }
  // Ends every step still pending (each then ends with operation_aborted).
  void Cancel() {
    error_code ignored;
    resolver_.cancel();
    socket_.close(ignored);
  }
  bool done() const { return done_; }
  absl::StatusOr<HttpResponse> Result() {
    if (response_) return std::move(*response_);
    return error_.ok() ? absl::InternalError("no answer") : error_;
  }

 private:
  void Connected(error_code ec) {
    if (ec) return Fail(Unreachable(ec, r_));
    if (!tls_) return Write(socket_);
    RequireName(tls_->native_handle(), r_.to.host);
    tls_->async_handshake(asio::ssl::stream_base::client, [this](error_code e) {
      if (e) return Fail(HandshakeError(tls_->native_handle(), e, r_.where));
      Write(*tls_);
    });
  }
  template <typename Stream>
  void Write(Stream& stream) {
    http::async_write(stream, r_.message, [this, &stream](error_code ec, size_t) {
      if (ec) return Fail(Unreachable(ec, r_));
      http::async_read_header(stream, buffer_, parser_,
                              [this, &stream](error_code e, size_t) { HeaderRead(stream, e); });
    });
  }
  template <typename Stream>
  void HeaderRead(Stream& stream, error_code ec) {
    // Boost 1.74's parser applies body_limit to chunked and close-delimited bodies but not to a
    // Content-Length it has read: that one is checked here, before the body is taken.
    if (!ec && parser_.content_length().value_or(0) > r_.max_bytes) ec = http::error::body_limit;
    if (ec) return Fail(ReadError(ec, r_));
    http::async_read(stream, buffer_, parser_, [this](error_code e, size_t) {
      if (e) return Fail(ReadError(e, r_));
      response_ = ToResponse(parser_.get());
      done_ = true;
    });
  }
  void Fail(absl::Status status) {
    error_ = std::move(status);
    done_ = true;
  }

  Request& r_;
  tcp::resolver resolver_;
  tcp::socket socket_;
  std::optional<asio::ssl::stream<tcp::socket&>> tls_;  // Over socket_, when TLS is on.
  boost::beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  std::optional<HttpResponse> response_;
  absl::Status error_;
  bool done_ = false;
};

// Runs the exchange to its end or its deadline, whichever comes first.
absl::StatusOr<HttpResponse> Run(Request& r, const TlsFiles& files) {
  std::optional<asio::ssl::context> ctx;
  if (files.enabled()) {
    ctx.emplace(asio::ssl::context::tls_client);
    ctx->set_options(asio::ssl::context::no_sslv2 | asio::ssl::context::no_sslv3 |
                     asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    if (absl::Status s = SetUpTls(*ctx, files); !s.ok()) return s;
  }
  asio::io_context io;
  Call call(io, r, ctx ? &*ctx : nullptr);
  call.Start();
  io.run_for(std::chrono::milliseconds(r.timeout_ms));
  if (!call.done()) {
    call.Cancel();
    io.restart();
    io.run();  // The cancelled steps end before the call and the context go.
    return absl::DeadlineExceededError(
        absl::StrCat(r.where, " did not answer within ", r.timeout_ms, " ms"));
  }
  return call.Result();
}

absl::StatusOr<HttpResponse> Send(http::verb verb, const std::string& host_port,
                                  const std::string& path, const std::string* content_type,
                                  const std::string* body, int timeout_ms, size_t max_bytes,
                                  const TlsFiles& tls, const std::vector<std::string>& extra) {
  absl::StatusOr<HostPort> to = ParseHostPort(host_port);
  if (!to.ok()) return to.status();
  Request r{*to,
            absl::StrCat(tls.enabled() ? "https://" : "http://", host_port, path),
            {},
            max_bytes,
            timeout_ms};
  r.message = http::request<http::string_body>(verb, path.empty() ? "/" : path, 11);
  r.message.set(http::field::host, host_port);
  r.message.set(http::field::connection, "close");
  for (const std::string& line : extra) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    r.message.set(std::string(absl::StripAsciiWhitespace(line.substr(0, colon))),
                  std::string(absl::StripAsciiWhitespace(line.substr(colon + 1))));
  }
  if (body != nullptr) {
    r.message.set(http::field::content_type, *content_type);
    r.message.body() = *body;
  }
  r.message.prepare_payload();
  return Run(r, tls);
}

}  // namespace

absl::StatusOr<HttpResponse> HttpGet(const std::string& host_port, const std::string& path,
                                     int timeout_ms, size_t max_bytes, const TlsFiles& tls,
                                     const std::vector<std::string>& headers) {
  return Send(http::verb::get, host_port, path, nullptr, nullptr, timeout_ms, max_bytes, tls,
              headers);
}

absl::StatusOr<HttpResponse> HttpPost(const std::string& host_port, const std::string& path,
                                      const std::string& content_type, const std::string& body,
                                      int timeout_ms, size_t max_bytes, const TlsFiles& tls,
                                      const std::vector<std::string>& headers) {
  return Send(http::verb::post, host_port, path, &content_type, &body, timeout_ms, max_bytes, tls,
              headers);
}

}  // namespace trainscope

// The event-driven HTTP server on Boost.Asio/Beast; see http_server.h. One thread runs every
// connection's I/O and timers (so the bookkeeping below needs no lock); handlers run on a pool
// and hand their response back to that thread. Boost stays inside this file.
#include "trainscope/common/http_server.h"

#include <openssl/ssl.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/ssl/context.hpp>
#include <boost/asio/ssl/stream.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/thread_pool.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/string_body.hpp>
#include <boost/beast/http/write.hpp>
#include <cerrno>
#include <chrono>
#include <future>
#include <optional>
#include <thread>
#include <tuple>
#include <unordered_map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "trainscope/common/http_tls.h"

namespace trainscope {
namespace {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using Clock = std::chrono::steady_clock;
using boost::system::error_code;

constexpr char kTooMany[] =
    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    "Content-Length: 21\r\nConnection: close\r\n\r\ntoo many connections\n";

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// %XX escapes decoded; a malformed one is kept as it is.
std::string PercentDecode(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] == '%' && i + 2 < in.size()) {
      const int hi = HexValue(in[i + 1]);
      const int lo = HexValue(in[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(in[i]);
  }
  return out;
}

// "/p?q" (or the absolute form "http://host/p?q") as the handler's Request.
HttpServer::Request ParseTarget(std::string_view target) {
  if (size_t scheme = target.find("://"); scheme != std::string_view::npos && target[0] != '/') {
    const size_t slash = target.find('/', scheme + 3);
    target = slash == std::string_view::npos ? std::string_view("/") : target.substr(slash);
  }
  HttpServer::Request request;
  const size_t q = target.find('?');
  request.path = PercentDecode(target.substr(0, q));
  if (q != std::string_view::npos) request.query = std::string(target.substr(q + 1));
  if (request.path.empty()) request.path = "/";
  return request;
}

HttpServer::Response Plain(int status, std::string body) {
  return {status, "text/plain; charset=utf-8", std::move(body)};
}

}  // namespace

namespace http_server_internal {
class Connection;
}  // namespace http_server_internal
using http_server_internal::Connection;

// Everything but the public face: the acceptors, the connections and their bookkeeping (touched
// on the I/O thread only), the handler pool.
class HttpServer::Impl {
 public:
  Impl(Handler handler, HttpTls* tls, const HttpServerOptions& options)
      : handler_(std::move(handler)),
        tls_(tls),
        options_(options),
        pool_(static_cast<size_t>(std::max(1, options.handler_threads))) {
    if (!options.slow_paths.empty()) {
      slow_pool_.emplace(static_cast<size_t>(std::max(1, options.slow_handler_threads)));
    }
  }
  ~Impl();

  absl::StatusOr<int> Listen(const std::vector<std::string>& addresses, int port);
  absl::Status SetUpTls();
  void Run() {
    thread_ = std::thread([this] { io_.run(); });
  }

  // For the connections.
  asio::io_context& io() { return io_; }
  asio::ssl::context* ssl() { return ssl_ ? &*ssl_ : nullptr; }
  const HttpServerOptions& options() const { return options_; }
  // Where Drain drops what it reads (the I/O thread's alone).
  std::array<char, 4096>& scratch() { return scratch_; }
  void Forget(uint64_t id, const std::string& address);
  // Runs the handler on the pool (the slow pool for options().slow_paths); `done` gets the
  // response on the I/O thread.
  void Handle(HttpServer::Request request, std::function<void(HttpServer::Response)> done);

 private:
  void Accept(tcp::acceptor* acceptor);
  void Admit(tcp::socket socket);
  bool MakeRoomFrom(const std::string& address);
  bool MakeRoom(const std::string& address);
  Connection* Oldest(const std::function<bool(const Connection&)>& pick);
  void Stop();
  HttpServer::Response Run(const HttpServer::Request& request);
  void HandleSlow(HttpServer::Request request, std::function<void(HttpServer::Response)> done);

  const Handler handler_;
  HttpTls* const tls_;
  const HttpServerOptions options_;
  // Declared first, destroyed last: every socket and timer below belongs to it.
  asio::io_context io_{1};
  std::optional<asio::ssl::context> ssl_;
  std::vector<std::unique_ptr<tcp::acceptor>> acceptors_;
  asio::steady_timer accept_pause_{io_};
  uint64_t next_id_ = 0;
  std::unordered_map<uint64_t, std::shared_ptr<Connection>> connections_;
  std::unordered_map<std::string, int> per_address_;
  bool stopping_ = false;
  std::array<char, 4096> scratch_;
  asio::thread_pool pool_;  // Before the connections it holds in queued work are destroyed.
  std::optional<asio::thread_pool> slow_pool_;  // For options_.slow_paths; none without.
  std::atomic<int> slow_queued_{0};             // Waiting for a thread of the slow pool.
  std::thread thread_;
};

namespace http_server_internal {

// One client connection: handshake (HTTPS), read a request, handle, write; again while the
// client keeps it alive. Lives on the I/O thread; its async operations hold it alive.
class Connection : public std::enable_shared_from_this<Connection> {
 public:
  enum class State { kHandshake, kReading, kHandling, kWriting, kIdle, kClosing };

  Connection(HttpServer::Impl* server, tcp::socket socket, uint64_t id, std::string address)
      : server_(server),
        id_(id),
        address_(std::move(address)),
        timer_(server->io()),
        accepted_(Clock::now()),
        since_(accepted_) {
    if (server->ssl() != nullptr) {
      tls_.emplace(std::move(socket), *server->ssl());
    } else {
      plain_.emplace(std::move(socket));
    }
  }

  void Start();
  void Close();
  State state() const { return state_; }
  Clock::time_point since() const { return since_; }
  const std::string& address() const { return address_; }

 private:
  tcp::socket& socket() { return tls_ ? tls_->next_layer() : *plain_; }
  void SetState(State s) {
    state_ = s;
    since_ = Clock::now();
  }
  void Deadline(Clock::time_point when);
  void CancelDeadline() {
    ++generation_;
    timer_.cancel();
  }
  void Read(Clock::time_point deadline);
  void OnRead(error_code ec);
  void Respond(HttpServer::Response response, bool head, unsigned version, bool keep_alive);
  void WatchGone();
  HttpServer::Request MakeRequest();
  void OnWritten(error_code ec);
  void WaitIdle();
  void Linger();
  void Drain();
  template <class F>
  void WithStream(F&& f) {
    if (tls_) {
      f(*tls_);
    } else {
      f(*plain_);
    }
  }

  HttpServer::Impl* const server_;
  const uint64_t id_;
  const std::string address_;
  std::optional<tcp::socket> plain_;
  std::optional<asio::ssl::stream<tcp::socket>> tls_;
  asio::steady_timer timer_;
  uint64_t generation_ = 0;  // Of the deadline; a stale expiry does nothing.
  const Clock::time_point accepted_;
  Clock::time_point since_;
  State state_ = State::kReading;
  bool closed_ = false;
  bool keep_alive_ = false;
  // Set when the client has left (or the connection is closed); the handler's requests share it.
  const std::shared_ptr<std::atomic<bool>> gone_ = std::make_shared<std::atomic<bool>>(false);
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::response<http::string_body> response_;
};

}  // namespace http_server_internal

void Connection::Deadline(Clock::time_point when) {
  const uint64_t generation = ++generation_;
  timer_.expires_at(when);
  timer_.async_wait([self = shared_from_this(), generation](error_code ec) {
    if (ec || self->closed_ || generation != self->generation_) return;
    self->Close();  // Too slow: the deadline holds whatever the pace of the bytes.
  });
}

void Connection::Start() {
  const HttpServerOptions& o = server_->options();
  const Clock::time_point request_deadline =
      accepted_ + std::chrono::milliseconds(o.request_timeout_ms);
  if (!tls_) return Read(request_deadline);
  SetState(State::kHandshake);
  Deadline(std::min(request_deadline,
                    accepted_ + std::chrono::milliseconds(o.tls_handshake_timeout_ms)));
  tls_->async_handshake(asio::ssl::stream_base::server,
                        [self = shared_from_this(), request_deadline](error_code ec) {
                          if (self->closed_) return;
                          if (ec) return self->Close();
                          self->Read(request_deadline);
                        });
}

void Connection::Read(Clock::time_point deadline) {
  SetState(State::kReading);
  Deadline(deadline);
  parser_.emplace();
  parser_->header_limit(static_cast<uint32_t>(server_->options().max_header_bytes));
  parser_->body_limit(server_->options().max_body_bytes);
  WithStream([this](auto& stream) {
    http::async_read(stream, buffer_, *parser_,
                     [self = shared_from_this()](error_code ec, size_t) { self->OnRead(ec); });
  });
}

void Connection::OnRead(error_code ec) {
  if (closed_) return;
  CancelDeadline();
  if (ec == http::error::header_limit) {
    return Respond(Plain(431, "request line and headers too large\n"), false, 11, false);
  }
  if (ec == http::error::body_limit) {
    return Respond(Plain(413, "request body too large\n"), false, 11, false);
  }
  if (ec && ec.category() == http::make_error_code(http::error::bad_target).category() &&
      ec != http::error::end_of_stream && ec != http::error::partial_message) {
    return Respond(Plain(400, "bad request\n"), false, 11, false);
  }
  if (ec) return Close();  // The client left, or its time ran out.
  const auto& request = parser_->get();
  const unsigned version = request.version();
  const bool keep_alive = request.keep_alive();
  const bool head = request.method() == http::verb::head;
  if (request.method() != http::verb::get && !head) {
    return Respond(Plain(405, "only GET\n"), false, version, false);
  }
  SetState(State::kHandling);
  server_->Handle(MakeRequest(), [self = shared_from_this(), head, version,
                                  keep_alive](HttpServer::Response response) {
    if (!self->closed_) self->Respond(std::move(response), head, version, keep_alive);
  });
  if (state_ == State::kHandling) WatchGone();
}

// The handler's view of the request just read.
HttpServer::Request Connection::MakeRequest() {
  const auto& request = parser_->get();
  const auto target = request.target();
  HttpServer::Request r = ParseTarget(std::string_view(target.data(), target.size()));
  if (auto it = request.find(http::field::authorization); it != request.end()) {
    r.authorization = std::string(it->value().data(), it->value().size());
  }
  r.client_address = address_;
  if (tls_) {
    SSL* ssl = tls_->native_handle();
    r.client_certificate =
        SSL_get0_peer_certificate(ssl) != nullptr && SSL_get_verify_result(ssl) == X509_V_OK;
  }
  r.gone = gone_;
  return r;
}

// While the handler runs: a client that closes its connection (or resets it) is noted in
// gone_, so that a handler waiting on its behalf can give up. Bytes of a pipelined request
// (or, over TLS, a close_notify) end the watch without a verdict.
void Connection::WatchGone() {
  socket().async_wait(tcp::socket::wait_read, [self = shared_from_this()](error_code ec) {
    if (ec || self->closed_ || self->state_ != State::kHandling) return;
    char byte = 0;
    const ssize_t n = ::recv(self->socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) self->gone_->store(true);
  });
}

void Connection::Respond(HttpServer::Response response, bool head, unsigned version,
                         bool keep_alive) {
  SetState(State::kWriting);
  Deadline(Clock::now() + std::chrono::milliseconds(server_->options().write_timeout_ms));
  keep_alive_ = keep_alive;
  response_ = {};
  response_.version(version);
  response_.result(static_cast<unsigned>(response.status));
  response_.set(http::field::content_type, response.content_type);
  response_.set(http::field::cache_control, "no-store");
  for (const auto& [name, value] : response.headers) response_.set(name, value);
  response_.body() = std::move(response.body);
  response_.prepare_payload();
  response_.keep_alive(keep_alive);
  if (head) response_.body().clear();  // Content-Length still says what GET would send.
  WithStream([this](auto& stream) {
    http::async_write(stream, response_,
                      [self = shared_from_this()](error_code ec, size_t) { self->OnWritten(ec); });
  });
}

void Connection::OnWritten(error_code ec) {
  if (closed_) return;
  if (ec) return Close();
  if (!keep_alive_) return Linger();
  WaitIdle();
}

// After the last response: our side shut, what the client still sends read and dropped until it
// shuts its side (1 s at most), so that closing does not reset the connection (a reset can
// discard the response before the client read it).
void Connection::Linger() {
  SetState(State::kClosing);
  Deadline(Clock::now() + std::chrono::seconds(1));
  error_code ignored;
  socket().shutdown(tcp::socket::shutdown_send, ignored);
  Drain();
}

void Connection::Drain() {
  socket().async_read_some(asio::buffer(server_->scratch()),
                           [self = shared_from_this()](error_code ec, size_t) {
                             if (self->closed_) return;
                             if (ec) return self->Close();
                             self->Drain();
                           });
}

void Connection::WaitIdle() {
  SetState(State::kIdle);
  response_ = {};
  const auto request_timeout = std::chrono::milliseconds(server_->options().request_timeout_ms);
  const bool pending = buffer_.size() > 0 || (tls_ && SSL_pending(tls_->native_handle()) > 0);
  if (pending) return Read(Clock::now() + request_timeout);  // Pipelined.
  Deadline(Clock::now() + std::chrono::milliseconds(server_->options().idle_timeout_ms));
  socket().async_wait(tcp::socket::wait_read,
                      [self = shared_from_this(), request_timeout](error_code ec) {
                        if (self->closed_) return;
                        if (ec) return self->Close();
                        self->Read(Clock::now() + request_timeout);
                      });
}

void Connection::Close() {
  if (closed_) return;
  closed_ = true;
  gone_->store(true);
  CancelDeadline();
  error_code ignored;
  socket().shutdown(tcp::socket::shutdown_send, ignored);
  socket().close(ignored);
  server_->Forget(id_, address_);  // Last: may destroy the map's reference to this.
}

HttpServer::Impl::~Impl() { Stop(); }

void HttpServer::Impl::Stop() {
  if (thread_.joinable()) {
    std::promise<void> closed;
    asio::post(io_, [this, &closed] {
      stopping_ = true;
      accept_pause_.cancel();
      for (auto& acceptor : acceptors_) acceptor->close();
      std::vector<std::shared_ptr<Connection>> all;
      for (auto& [id, c] : connections_) all.push_back(c);
      for (auto& c : all) c->Close();
      closed.set_value();
    });
    closed.get_future().wait();
    io_.stop();
    thread_.join();
  }
  pool_.stop();  // Queued handlers are dropped; running ones finish.
  pool_.join();
  if (slow_pool_) {
    slow_pool_->stop();
    slow_pool_->join();
  }
  connections_.clear();
}

absl::StatusOr<int> HttpServer::Impl::Listen(const std::vector<std::string>& addresses, int port) {
  const std::vector<std::string> hosts =
      addresses.empty() ? std::vector<std::string>{"0.0.0.0"} : addresses;
  for (const std::string& host : hosts) {
    error_code ec;
    asio::ip::address address = asio::ip::make_address(host, ec);
    if (ec) {
      tcp::resolver resolver(io_);
      auto found = resolver.resolve(host, "", ec);
      if (ec || found.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("cannot serve HTTP on ", host, ": not an address (", ec.message(), ")"));
      }
      address = found.begin()->endpoint().address();
    }
    const tcp::endpoint endpoint(address, static_cast<uint16_t>(port));
    auto acceptor = std::make_unique<tcp::acceptor>(io_);
    if (!acceptor->open(endpoint.protocol(), ec) &&
        !acceptor->set_option(tcp::acceptor::reuse_address(true), ec) &&
        !acceptor->bind(endpoint, ec)) {
      acceptor->listen(asio::socket_base::max_listen_connections, ec);
    }
    if (ec) {
      return absl::UnavailableError(absl::StrCat("cannot serve HTTP on ", host, ":", port, ": ",
                                                 ec.message(), " (port in use? pick another)"));
    }
    if (port == 0) port = acceptor->local_endpoint().port();  // The same on every address.
    acceptors_.push_back(std::move(acceptor));
  }
  for (auto& acceptor : acceptors_) Accept(acceptor.get());
  return port;
}

absl::Status HttpServer::Impl::SetUpTls() {
  if (tls_ == nullptr) return absl::OkStatus();
  ssl_.emplace(asio::ssl::context::tls_server);
  ssl_->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                    asio::ssl::context::no_sslv3 | asio::ssl::context::single_dh_use);
  // OpenSSL's record buffers only while a record is in flight: most connections wait.
  SSL_CTX_set_mode(ssl_->native_handle(), SSL_MODE_RELEASE_BUFFERS);
  tls_->ConfigureServer(ssl_->native_handle());
  return absl::OkStatus();
}

void HttpServer::Impl::Accept(tcp::acceptor* acceptor) {
  acceptor->async_accept([this, acceptor](error_code ec, tcp::socket socket) {
    if (stopping_ || ec == asio::error::operation_aborted) return;
    if (ec) {
      // Out of file descriptors (or memory): pause rather than spin; the kernel's backlog
      // holds the clients meanwhile.
      accept_pause_.expires_after(std::chrono::milliseconds(50));
      accept_pause_.async_wait([this, acceptor](error_code e) {
        if (!e && !stopping_) Accept(acceptor);
      });
      return;
    }
    Admit(std::move(socket));
    Accept(acceptor);
  });
}

void HttpServer::Impl::Admit(tcp::socket socket) {
  error_code ec;
  const tcp::endpoint peer = socket.remote_endpoint(ec);
  if (ec) return;  // Gone already.
  const std::string address = peer.address().to_string();
  const int mine = per_address_.count(address) ? per_address_[address] : 0;
  const bool room =
      (mine < options_.max_connections_per_address || MakeRoomFrom(address)) &&
      (static_cast<int>(connections_.size()) < options_.max_connections || MakeRoom(address));
  if (!room) {
    if (!ssl_) {  // Say why, if it fits in the socket's buffer now; never wait for it.
      socket.non_blocking(true, ec);
      socket.write_some(asio::buffer(kTooMany, sizeof(kTooMany) - 1), ec);
      socket.shutdown(tcp::socket::shutdown_send, ec);
    }
    socket.close(ec);
    return;
  }
  // A response or a TLS flight goes out whole: Nagle would hold its last piece for the
  // client's delayed ACK (40 ms).
  socket.set_option(tcp::no_delay(true), ec);
  const uint64_t id = next_id_++;
  auto connection = std::make_shared<Connection>(this, std::move(socket), id, address);
  connections_.emplace(id, connection);
  ++per_address_[address];
  connection->Start();
}

Connection* HttpServer::Impl::Oldest(const std::function<bool(const Connection&)>& pick) {
  Connection* oldest = nullptr;
  for (auto& [id, c] : connections_) {
    if (pick(*c) && (oldest == nullptr || c->since() < oldest->since())) oldest = c.get();
  }
  return oldest;
}

namespace {

bool Idle(const Connection& c) {
  return c.state() == Connection::State::kIdle || c.state() == Connection::State::kClosing;
}

bool Unfinished(const Connection& c) {
  return c.state() == Connection::State::kReading || c.state() == Connection::State::kHandshake;
}

}  // namespace

// `address` holds its share: closes its oldest idle connection, else its oldest unfinished
// request, so that a client's newest connections are the ones held (a slow client cannot keep
// out another client behind the same address). Whether room was made.
bool HttpServer::Impl::MakeRoomFrom(const std::string& address) {
  Connection* victim =
      Oldest([&](const Connection& c) { return Idle(c) && c.address() == address; });
  if (victim == nullptr) {
    victim = Oldest([&](const Connection& c) { return Unfinished(c) && c.address() == address; });
  }
  if (victim == nullptr) return false;
  victim->Close();
  return true;
}

// Full: closes the oldest idle keep-alive connection; else, when `address` holds fewer
// connections than the client holding the most, that client's oldest unfinished request (a slow
// client's, most likely). Connections whose handler runs, or whose response is being written,
// are never closed here. Whether room was made.
bool HttpServer::Impl::MakeRoom(const std::string& address) {
  if (Connection* idle = Oldest(Idle); idle != nullptr) {
    idle->Close();
    return true;
  }
  std::string heaviest;
  int most = 0;
  for (const auto& [a, n] : per_address_) {
    if (n > most) std::tie(heaviest, most) = std::tie(a, n);
  }
  const int mine = per_address_.count(address) ? per_address_[address] : 0;
  if (mine + 1 >= most) return false;
  Connection* victim =
      Oldest([&](const Connection& c) { return Unfinished(c) && c.address() == heaviest; });
  if (victim == nullptr) return false;
  victim->Close();
  return true;
}

void HttpServer::Impl::Forget(uint64_t id, const std::string& address) {
  if (auto it = per_address_.find(address); it != per_address_.end() && --it->second <= 0) {
    per_address_.erase(it);
  }
  connections_.erase(id);
}

HttpServer::Response HttpServer::Impl::Run(const HttpServer::Request& request) {
  try {
    return handler_(request);
  } catch (const std::exception& e) {
    return Plain(500, absl::StrCat("internal error: ", e.what(), "\n"));
  }
}

void HttpServer::Impl::Handle(HttpServer::Request request,
                              std::function<void(HttpServer::Response)> done) {
  if (slow_pool_ && std::find(options_.slow_paths.begin(), options_.slow_paths.end(),
                              request.path) != options_.slow_paths.end()) {
    return HandleSlow(std::move(request), std::move(done));
  }
  asio::post(pool_, [this, request = std::move(request), done = std::move(done)]() mutable {
    HttpServer::Response response = Run(request);
    asio::post(io_, [done = std::move(done), response = std::move(response)]() mutable {
      done(std::move(response));
    });
  });
}

// A request for a slow path: queued for the slow pool within its bounds (on the I/O thread).
void HttpServer::Impl::HandleSlow(HttpServer::Request request,
                                  std::function<void(HttpServer::Response)> done) {
  if (slow_queued_.load() >= options_.slow_queue_limit) {
    return done(Plain(503, absl::StrCat("busy: ", options_.slow_queue_limit, " requests for ",
                                        request.path, " wait already; try again shortly\n")));
  }
  ++slow_queued_;
  const Clock::time_point queued = Clock::now();
  asio::post(*slow_pool_, [this, queued, request = std::move(request),
                           done = std::move(done)]() mutable {
    --slow_queued_;
    const auto waited =
        std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - queued);
    HttpServer::Response response;
    if (request.Gone()) {
      response = Plain(503, "the client left before its request ran\n");
    } else if (waited.count() > options_.slow_queue_timeout_ms) {
      response = Plain(
          503, absl::StrCat("busy: waited ", waited.count(), " ms for a free thread (",
                            options_.slow_queue_timeout_ms, " ms at most); try again shortly\n"));
    } else {
      response = Run(request);
    }
    asio::post(io_, [done = std::move(done), response = std::move(response)]() mutable {
      done(std::move(response));
    });
  });
}

absl::StatusOr<std::unique_ptr<HttpServer>> HttpServer::Start(
    const std::vector<std::string>& addresses, int port, Handler handler, HttpTls* tls,
    const HttpServerOptions& options) {
  std::unique_ptr<HttpServer> server(new HttpServer);
  server->impl_ = std::make_unique<Impl>(std::move(handler), tls, options);
  if (absl::Status s = server->impl_->SetUpTls(); !s.ok()) return s;
  absl::StatusOr<int> bound = server->impl_->Listen(addresses, port);
  if (!bound.ok()) return bound.status();
  server->port_ = *bound;
  server->impl_->Run();
  return server;
}

HttpServer::~HttpServer() = default;

}  // namespace trainscope

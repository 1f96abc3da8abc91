// Tests of the OTLP/gRPC exporter against a real in-process TraceService on a loopback port:
// every field of the request; the endpoint and OTEL_* parsing; a collector that is down or
// silent fails the export and is counted (what it costs a caller of OnEnd: tracing_benchmark).
#include "trainscope/telemetry/otlp_exporter.h"

#include <arpa/inet.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "trainscope/telemetry/batch_span_processor.h"

namespace trainscope::telemetry {
namespace {

namespace otlp_collector = ::opentelemetry::proto::collector::trace::v1;
namespace otlp_common = ::opentelemetry::proto::common::v1;
namespace otlp_trace = ::opentelemetry::proto::trace::v1;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

// A TraceService that keeps every request it receives.
class FakeCollector final : public otlp_collector::TraceService::Service {
 public:
  grpc::Status Export(grpc::ServerContext* context,
                      const otlp_collector::ExportTraceServiceRequest* request,
                      otlp_collector::ExportTraceServiceResponse* response) override {
    std::lock_guard<std::mutex> lock(mu_);
    requests_.push_back(*request);
    if (reject_ > 0) {
      response->mutable_partial_success()->set_rejected_spans(reject_);
      response->mutable_partial_success()->set_error_message("too old");
    }
    return grpc::Status::OK;
  }

  std::vector<otlp_collector::ExportTraceServiceRequest> requests() {
    std::lock_guard<std::mutex> lock(mu_);
    return requests_;
  }
  void set_reject(int64_t n) {
    std::lock_guard<std::mutex> lock(mu_);
    reject_ = n;
  }

 private:
  std::mutex mu_;
  std::vector<otlp_collector::ExportTraceServiceRequest> requests_;
  int64_t reject_ = 0;
};

class CollectorServer {
 public:
  CollectorServer() {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterService(&collector_);
    server_ = builder.BuildAndStart();
  }
  ~CollectorServer() { server_->Shutdown(std::chrono::system_clock::now()); }
  int port() const { return port_; }
  std::string endpoint() const { return absl::StrCat("http://127.0.0.1:", port_); }
  FakeCollector& collector() { return collector_; }

 private:
  FakeCollector collector_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

// A loopback TCP socket; Listen() makes it accept connections into the backlog without ever
// answering (a hung collector). Without Listen(), its port refuses connections once closed.
class Socket {
 public:
  Socket() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    EXPECT_EQ(bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    socklen_t len = sizeof(addr);
    EXPECT_EQ(getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len), 0);
    port_ = ntohs(addr.sin_port);
  }
  ~Socket() { Close(); }
  void Listen() { EXPECT_EQ(listen(fd_, 16), 0); }
  void Close() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

std::string Bytes(std::initializer_list<uint8_t> bytes) {
  return std::string(bytes.begin(), bytes.end());
}

template <size_t N>
std::string Bytes(const std::array<uint8_t, N>& bytes) {
  return std::string(bytes.begin(), bytes.end());
}

const otlp_common::AnyValue* Find(
    const google::protobuf::RepeatedPtrField<otlp_common::KeyValue>& attributes,
    const std::string& key) {
  for (const otlp_common::KeyValue& kv : attributes) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

// Options for `endpoint` with defaults elsewhere (gcc warns about designated initializers that
// leave members out).
OtlpExporterOptions At(std::string endpoint, int timeout_ms = 2000) {
  OtlpExporterOptions options;
  options.endpoint = std::move(endpoint);
  options.timeout_ms = timeout_ms;
  return options;
}

SpanData ClientSpan() {
  SpanData span;
  span.context = *ParseTraceparent("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  span.parent_span_id = {1, 2, 3, 4, 5, 6, 7, 8};
  span.name = "trainscope.v1.ParameterService/Pull";
  span.kind = SpanKind::kClient;
  span.start_unix_nano = 1700000000000000000ULL;
  span.end_unix_nano = 1700000000001500000ULL;
  span.attributes = {{"rpc.system", std::string("grpc")},
                     {"rpc.grpc.status_code", int64_t{4}},
                     {"trainscope.deadline_seconds", 0.25},
                     {"trainscope.retry", true}};
  span.events = {{"sent", 1700000000000100000ULL, {{"bytes", int64_t{4096}}}},
                 {"received", 1700000000001400000ULL, {}}};
  span.status_code = kStatusError;
  span.status_message = "DEADLINE_EXCEEDED: no answer within 250 ms";
  return span;
}

TEST(OtlpExporterTest, SendsEveryField) {
  CollectorServer server;
  absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> exporter = OtlpGrpcExporter::Create(
      {.endpoint = server.endpoint(),
       .service_name = "trainscope-worker",
       .resource_attributes = {{"trainscope.cluster", std::string("run7")},
                               {"trainscope.task", int64_t{3}},
                               {"service.name", std::string("ignored: service_name wins")}},
       .timeout_ms = 5000,
       .tls = {}});
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  EXPECT_EQ((*exporter)->target(), absl::StrCat("127.0.0.1:", server.port()));

  SpanData root;
  root.context = *ParseTraceparent("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01");
  root.name = "step";
  root.kind = SpanKind::kInternal;
  root.start_unix_nano = 10;
  root.end_unix_nano = 20;
  std::vector<SpanData> batch = {ClientSpan(), root};
  absl::Status status = (*exporter)->Export(batch);
  ASSERT_TRUE(status.ok()) << status;

  std::vector<otlp_collector::ExportTraceServiceRequest> requests = server.collector().requests();
  ASSERT_EQ(requests.size(), 1u);
  ASSERT_EQ(requests[0].resource_spans_size(), 1);
  const otlp_trace::ResourceSpans& rs = requests[0].resource_spans(0);
  const auto& resource = rs.resource().attributes();
  ASSERT_NE(Find(resource, "service.name"), nullptr);
  EXPECT_EQ(Find(resource, "service.name")->string_value(), "trainscope-worker");
  int service_names = 0;
  for (const auto& kv : resource) service_names += kv.key() == "service.name" ? 1 : 0;
  EXPECT_EQ(service_names, 1);
  ASSERT_NE(Find(resource, "trainscope.cluster"), nullptr);
  EXPECT_EQ(Find(resource, "trainscope.cluster")->string_value(), "run7");
  ASSERT_NE(Find(resource, "trainscope.task"), nullptr);
  EXPECT_EQ(Find(resource, "trainscope.task")->int_value(), 3);

  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "trainscope.runtime");
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 2);
  const otlp_trace::Span& span = rs.scope_spans(0).spans(0);
  EXPECT_EQ(span.trace_id(), Bytes({0x4b, 0xf9, 0x2f, 0x35, 0x77, 0xb3, 0x4d, 0xa6, 0xa3, 0xce,
                                    0x92, 0x9d, 0x0e, 0x0e, 0x47, 0x36}));
  EXPECT_EQ(span.span_id(), Bytes({0x00, 0xf0, 0x67, 0xaa, 0x0b, 0xa9, 0x02, 0xb7}));
  EXPECT_EQ(span.parent_span_id(), Bytes({1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(span.flags(), 1u);
  EXPECT_EQ(span.name(), "trainscope.v1.ParameterService/Pull");
  EXPECT_EQ(span.kind(), otlp_trace::Span::SPAN_KIND_CLIENT);
  EXPECT_EQ(span.start_time_unix_nano(), 1700000000000000000ULL);
  EXPECT_EQ(span.end_time_unix_nano(), 1700000000001500000ULL);
  ASSERT_EQ(span.attributes_size(), 4);
  EXPECT_EQ(span.attributes(0).key(), "rpc.system");
  EXPECT_EQ(span.attributes(0).value().string_value(), "grpc");
  EXPECT_EQ(span.attributes(1).value().value_case(), otlp_common::AnyValue::kIntValue);
  EXPECT_EQ(span.attributes(1).value().int_value(), 4);
  EXPECT_EQ(span.attributes(2).value().value_case(), otlp_common::AnyValue::kDoubleValue);
  EXPECT_DOUBLE_EQ(span.attributes(2).value().double_value(), 0.25);
  EXPECT_EQ(span.attributes(3).value().value_case(), otlp_common::AnyValue::kBoolValue);
  EXPECT_TRUE(span.attributes(3).value().bool_value());
  ASSERT_EQ(span.events_size(), 2);
  EXPECT_EQ(span.events(0).name(), "sent");
  EXPECT_EQ(span.events(0).time_unix_nano(), 1700000000000100000ULL);
  ASSERT_EQ(span.events(0).attributes_size(), 1);
  EXPECT_EQ(span.events(0).attributes(0).key(), "bytes");
  EXPECT_EQ(span.events(0).attributes(0).value().int_value(), 4096);
  EXPECT_EQ(span.events(1).name(), "received");
  EXPECT_EQ(span.status().code(), otlp_trace::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(span.status().message(), "DEADLINE_EXCEEDED: no answer within 250 ms");

  const otlp_trace::Span& root_span = rs.scope_spans(0).spans(1);
  EXPECT_TRUE(root_span.parent_span_id().empty());  // A root has no parent id at all.
  EXPECT_EQ(root_span.kind(), otlp_trace::Span::SPAN_KIND_INTERNAL);
  EXPECT_FALSE(root_span.has_status());  // Unset.
  EXPECT_EQ(root_span.trace_id(), Bytes(root.context.trace_id));
}

TEST(OtlpExporterTest, TracerAndProcessorEndToEnd) {
  CollectorServer server;
  absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> exporter =
      OtlpGrpcExporter::Create(At(server.endpoint()));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  TracingStats stats;
  BatchSpanProcessor processor(
      std::move(*exporter),
      {.max_queue_size = 64, .max_export_batch_size = 16, .schedule_delay_ms = 50}, &stats);
  Tracer tracer({}, &processor, &stats);

  // A client span, and the server span a peer would make from the traceparent it received.
  SpanData client;
  client.context = tracer.NewContext(nullptr);
  client.name = "client";
  client.kind = SpanKind::kClient;
  client.start_unix_nano = NowUnixNanos();
  const std::string header = FormatTraceparent(client.context);
  std::optional<SpanContext> remote = ParseTraceparent(header);
  ASSERT_TRUE(remote.has_value());
  SpanData server_span;
  server_span.context = tracer.NewContext(&*remote);
  server_span.parent_span_id = remote->span_id;
  server_span.name = "server";
  server_span.kind = SpanKind::kServer;
  server_span.start_unix_nano = NowUnixNanos();
  server_span.end_unix_nano = NowUnixNanos();
  server_span.status_code = kStatusOk;
  tracer.End(std::move(server_span));
  client.end_unix_nano = NowUnixNanos();
  tracer.End(std::move(client));
  ASSERT_TRUE(processor.ForceFlush(milliseconds(5000)).ok());

  EXPECT_EQ(stats.spans_exported.load(), 2u);
  EXPECT_EQ(stats.export_failures.load(), 0u);
  std::vector<const otlp_trace::Span*> spans;
  std::vector<otlp_collector::ExportTraceServiceRequest> requests = server.collector().requests();
  for (const auto& request : requests) {
    for (const auto& rs : request.resource_spans()) {
      for (const auto& ss : rs.scope_spans()) {
        for (const auto& span : ss.spans()) spans.push_back(&span);
      }
    }
  }
  ASSERT_EQ(spans.size(), 2u);
  const otlp_trace::Span& s = *spans[0];
  const otlp_trace::Span& c = *spans[1];
  EXPECT_EQ(s.name(), "server");
  EXPECT_EQ(c.name(), "client");
  EXPECT_EQ(s.trace_id(), c.trace_id());
  EXPECT_EQ(s.parent_span_id(), c.span_id());
  EXPECT_TRUE(c.parent_span_id().empty());
  EXPECT_EQ(s.kind(), otlp_trace::Span::SPAN_KIND_SERVER);
  EXPECT_EQ(s.status().code(), otlp_trace::Status::STATUS_CODE_OK);
  EXPECT_LE(c.start_time_unix_nano(), s.start_time_unix_nano());
  EXPECT_LE(s.end_time_unix_nano(), c.end_time_unix_nano());
}

TEST(OtlpExporterTest, PartialSuccessIsCountedNotFailed) {
  CollectorServer server;
  server.collector().set_reject(1);
  auto exporter = OtlpGrpcExporter::Create(At(server.endpoint()));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::vector<SpanData> batch = {ClientSpan(), ClientSpan()};
  EXPECT_TRUE((*exporter)->Export(batch).ok());
  EXPECT_EQ((*exporter)->rejected_spans(), 1u);
}

TEST(OtlpExporterTest, DeadCollectorFailsFastAndIsCounted) {
  Socket reserved;  // Bound, never listening: connections are refused.
  const int port = reserved.port();
  auto exporter = OtlpGrpcExporter::Create(At(absl::StrCat("http://127.0.0.1:", port)));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::vector<SpanData> batch = {ClientSpan()};
  absl::Status status = (*exporter)->Export(batch);
  // Unavailable, not DeadlineExceeded: it failed without waiting out its deadline.
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_NE(status.message().find(absl::StrCat("127.0.0.1:", port)), absl::string_view::npos)
      << status;

  // What a caller's OnEnd costs meanwhile is measured, not asserted: tracing_benchmark,
  // BM_OnEndDeadCollector.
  TracingStats stats;
  BatchSpanProcessor processor(
      std::move(*exporter),
      {.max_queue_size = 128, .max_export_batch_size = 8, .schedule_delay_ms = 20}, &stats);
  for (int i = 0; i < 5000; ++i) processor.OnEnd(ClientSpan());
  ASSERT_TRUE(processor.ForceFlush(milliseconds(30000)).ok());
  EXPECT_GT(stats.export_failures.load(), 0u);
  EXPECT_EQ(stats.spans_exported.load(), 0u);
  EXPECT_EQ(stats.spans_failed.load() + stats.spans_dropped.load(), 5000u);
}

TEST(OtlpExporterTest, SilentCollectorHitsTheDeadline) {
  Socket hung;
  hung.Listen();  // Accepts TCP into the backlog, never speaks HTTP/2.
  auto exporter = OtlpGrpcExporter::Create(At(absl::StrCat("127.0.0.1:", hung.port()), 200));
  ASSERT_TRUE(exporter.ok()) << exporter.status();
  std::vector<SpanData> batch = {ClientSpan()};
  const auto start = Clock::now();
  absl::Status status = (*exporter)->Export(batch);
  const auto took = Clock::now() - start;
  EXPECT_FALSE(status.ok());
  EXPECT_EQ(status.code(), absl::StatusCode::kDeadlineExceeded) << status;
  EXPECT_LT(took, milliseconds(2000));
}

TEST(OtlpExporterTest, CreateRejectsBadOptions) {
  auto tls = OtlpGrpcExporter::Create(At("https://collector:4317"));
  EXPECT_EQ(tls.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(tls.status().message().find("--tls_* flags"), absl::string_view::npos);
  auto timeout = OtlpGrpcExporter::Create(At("127.0.0.1:4317", 0));
  EXPECT_EQ(timeout.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(OtlpEndpointTest, Table) {
  struct EndpointCase {
    std::string endpoint;
    std::string target;  // Empty: an error.
    std::string error;   // A piece of the message.
  };
  const std::vector<EndpointCase> cases = {
      {"http://127.0.0.1:4317", "127.0.0.1:4317", ""},
      {"http://collector:4318/", "collector:4318", ""},
      {"HTTP://collector:9", "collector:9", ""},
      {"collector:4317", "collector:4317", ""},
      {"http://collector", "collector:4317", ""},
      {"collector", "collector:4317", ""},
      {" http://10.0.0.3:55680 ", "10.0.0.3:55680", ""},
      {"http://[::1]:4317", "[::1]:4317", ""},
      {"http://[::1]", "[::1]:4317", ""},
      {"https://collector:4317", "", "--tls_* flags"},
      {"grpc://collector:4317", "", "scheme \"grpc\" not supported"},
      {"http://collector:4318/v1/traces", "", "OTLP/HTTP"},
      {"", "", "empty"},
      {"http://", "", "no host"},
      {"http://collector:port", "", "\"http://collector:port\""},
      {"http://collector:99999", "", "port must be a number"},
      {"http://:4317", "", "no host"},
      {"http://coll ector:4317", "", "host has character"},
  };
  for (const EndpointCase& c : cases) {
    absl::StatusOr<std::string> target = ParseOtlpEndpoint(c.endpoint);
    if (c.target.empty()) {
      ASSERT_FALSE(target.ok()) << c.endpoint << " -> " << *target;
      EXPECT_EQ(target.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_NE(target.status().message().find(c.error), absl::string_view::npos)
          << c.endpoint << ": " << target.status();
      EXPECT_NE(target.status().message().find("bad OTLP endpoint"), absl::string_view::npos);
    } else {
      ASSERT_TRUE(target.ok()) << c.endpoint << ": " << target.status();
      EXPECT_EQ(*target, c.target) << c.endpoint;
    }
  }
}

class OtlpEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { Clear(); }
  void TearDown() override { Clear(); }
  static void Clear() {
    for (const char* name : {"OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                             "OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES",
                             "OTEL_EXPORTER_OTLP_TIMEOUT", "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"}) {
      unsetenv(name);
    }
  }
  static const Attribute* FindAttribute(const OtlpExporterOptions& options,
                                        const std::string& key) {
    for (const Attribute& a : options.resource_attributes) {
      if (a.key == key) return &a;
    }
    return nullptr;
  }
  static std::string StringOf(const OtlpExporterOptions& options, const std::string& key) {
    const Attribute* a = FindAttribute(options, key);
    if (a == nullptr || !std::holds_alternative<std::string>(a->value)) return "<missing>";
    return std::get<std::string>(a->value);
  }
};

TEST_F(OtlpEnvTest, Defaults) {
  std::string warning = "stale";
  OtlpExporterOptions options = OtlpOptionsFromEnv("run7", "ps", 1, &warning);
  EXPECT_TRUE(warning.empty()) << warning;
  EXPECT_EQ(options.endpoint, "http://127.0.0.1:4317");
  EXPECT_EQ(options.service_name, "trainscope-ps");
  EXPECT_EQ(options.timeout_ms, 2000);
  EXPECT_EQ(StringOf(options, "service.name"), "trainscope-ps");
  EXPECT_EQ(StringOf(options, "trainscope.cluster"), "run7");
  EXPECT_EQ(StringOf(options, "trainscope.role"), "ps");
  EXPECT_EQ(StringOf(options, "service.instance.id"), "ps:1");
  EXPECT_NE(StringOf(options, "host.name"), "<missing>");
  const Attribute* task = FindAttribute(options, "trainscope.task");
  ASSERT_NE(task, nullptr);
  EXPECT_EQ(std::get<int64_t>(task->value), 1);
  const Attribute* pid = FindAttribute(options, "process.pid");
  ASSERT_NE(pid, nullptr);
  EXPECT_EQ(std::get<int64_t>(pid->value), getpid());
}

TEST_F(OtlpEnvTest, VariablesOverride) {
  setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://general:4317", 1);
  EXPECT_EQ(OtlpOptionsFromEnv("c", "worker", 0).endpoint, "http://general:4317");
  setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://traces:4317", 1);
  EXPECT_EQ(OtlpOptionsFromEnv("c", "worker", 0).endpoint, "http://traces:4317");

  setenv("OTEL_RESOURCE_ATTRIBUTES",
         "deployment.environment=prod, team=ml%20infra ,service.name=from-attrs,"
         "trainscope.role=liar,note=a%2Cb%3Dc",
         1);
  OtlpExporterOptions options = OtlpOptionsFromEnv("c", "worker", 2);
  EXPECT_EQ(options.service_name, "from-attrs");
  EXPECT_EQ(StringOf(options, "service.name"), "from-attrs");
  EXPECT_EQ(StringOf(options, "deployment.environment"), "prod");
  EXPECT_EQ(StringOf(options, "team"), "ml infra");
  EXPECT_EQ(StringOf(options, "note"), "a,b=c");
  EXPECT_EQ(StringOf(options, "trainscope.role"), "worker");  // Ours win.

  setenv("OTEL_SERVICE_NAME", "explicit", 1);
  options = OtlpOptionsFromEnv("c", "worker", 2);
  EXPECT_EQ(options.service_name, "explicit");
  EXPECT_EQ(StringOf(options, "service.name"), "explicit");
  int service_names = 0;
  for (const Attribute& a : options.resource_attributes) service_names += a.key == "service.name";
  EXPECT_EQ(service_names, 1);

  setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "500", 1);
  EXPECT_EQ(OtlpOptionsFromEnv("c", "worker", 2).timeout_ms, 500);
  setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "700", 1);
  EXPECT_EQ(OtlpOptionsFromEnv("c", "worker", 2).timeout_ms, 700);
}

TEST_F(OtlpEnvTest, BadEntriesAreSkippedWithAWarning) {
  setenv("OTEL_RESOURCE_ATTRIBUTES", "good=1,novalue,bad=%zz,=empty", 1);
  setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "soon", 1);
  std::string warning;
  OtlpExporterOptions options = OtlpOptionsFromEnv("c", "chief", 0, &warning);
  EXPECT_EQ(StringOf(options, "good"), "1");
  EXPECT_EQ(FindAttribute(options, "bad"), nullptr);
  EXPECT_EQ(options.timeout_ms, 2000);
  EXPECT_NE(warning.find("\"novalue\""), std::string::npos) << warning;
  EXPECT_NE(warning.find("\"bad=%zz\""), std::string::npos) << warning;
  EXPECT_NE(warning.find("\"=empty\""), std::string::npos) << warning;
  EXPECT_NE(warning.find("OTEL_EXPORTER_OTLP_TIMEOUT"), std::string::npos) << warning;
}

}  // namespace
}  // namespace trainscope::telemetry

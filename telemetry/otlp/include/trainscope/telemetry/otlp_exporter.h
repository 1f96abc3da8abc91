#pragma once
// The OTLP/gRPC span exporter: sends batches of SpanData to an OpenTelemetry collector (by
// default the node's sidecar on 127.0.0.1:4317) as
// opentelemetry.proto.collector.trace.v1.TraceService/Export. The only place where spans
// become protobuf; this header shows no protobuf or gRPC type.

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "trainscope/common/tls.h"
#include "trainscope/telemetry/batch_span_processor.h"
#include "trainscope/telemetry/tracing.h"

namespace trainscope::telemetry {

// The standard OTLP/gRPC port, and where spans go when nothing says otherwise.
inline constexpr int kOtlpGrpcPort = 4317;
inline constexpr char kDefaultOtlpEndpoint[] = "http://127.0.0.1:4317";
// The instrumentation scope of every span the runtime makes.
inline constexpr char kInstrumentationScope[] = "trainscope.runtime";

// Where and as whom to export.
struct OtlpExporterOptions {
  // "http://host:port" as OTEL_EXPORTER_OTLP_ENDPOINT writes it ("host:port" also accepted).
  std::string endpoint = kDefaultOtlpEndpoint;
  // The resource's service.name.
  std::string service_name;
  // Further resource attributes (a service.name here yields to `service_name`).
  std::vector<Attribute> resource_attributes;
  // Deadline of one Export call.
  int timeout_ms = 2000;
  // TLS to the collector (the node's sidecar) when set: the process's --tls_* files.
  TlsFiles tls;
};

// Turns an OTLP endpoint into a gRPC target "host:port": accepts "http://host:port",
// "http://host" (port 4317), "host:port", "[v6addr]:port", with an optional trailing '/'.
// InvalidArgument for "https://" (TLS comes from the --tls_* flags), another scheme, a path (that
// is OTLP/HTTP's form) or a malformed host or port; the message quotes the text. Thread-safe.
absl::StatusOr<std::string> ParseOtlpEndpoint(absl::string_view endpoint);

// The options the standard variables ask for: OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, else
// OTEL_EXPORTER_OTLP_ENDPOINT, else kDefaultOtlpEndpoint; OTEL_SERVICE_NAME, else a
// service.name in OTEL_RESOURCE_ATTRIBUTES, else "trainscope-<role>"; OTEL_RESOURCE_ATTRIBUTES
// ("k=v,k=v", percent-decoded); OTEL_EXPORTER_OTLP_TRACES_TIMEOUT, else
// OTEL_EXPORTER_OTLP_TIMEOUT (ms). The resource always carries service.name,
// trainscope.cluster, trainscope.role, trainscope.task, service.instance.id ("role:task"),
// process.pid and host.name; these win over the same keys in OTEL_RESOURCE_ATTRIBUTES (except
// service.name, which follows the order above). Entries it cannot use are skipped and
// `*warning` (when not null) says so. The endpoint is checked later, by Create.
OtlpExporterOptions OtlpOptionsFromEnv(absl::string_view cluster, absl::string_view role, int task,
                                       std::string* warning = nullptr);

// Exports each batch as one ExportTraceServiceRequest (one ResourceSpans, one ScopeSpans named
// kInstrumentationScope) on a gRPC channel to the endpoint, with the options' deadline.
// Failures (collector down, deadline, rejection) come back as a status, never as an
// exception. Export is called by one thread at a time (SpanExporter's contract).
class OtlpGrpcExporter final : public SpanExporter {
 public:
  // InvalidArgument when the endpoint cannot be used (see ParseOtlpEndpoint). Does not
  // connect: a collector that is not up yet is not an error here.
  static absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> Create(OtlpExporterOptions options);
  ~OtlpGrpcExporter() override;

  // Sends `batch` (left as it was). OK also when the collector accepted part of it
  // (rejected_spans() counts the rest).
  absl::Status Export(std::vector<SpanData>& batch) override;

  // The gRPC target, "host:port".
  const std::string& target() const;
  // Spans the collector said it rejected (OTLP partial success). Thread-safe.
  uint64_t rejected_spans() const { return rejected_spans_.load(std::memory_order_relaxed); }

 private:
  struct Impl;
  explicit OtlpGrpcExporter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  std::atomic<uint64_t> rejected_spans_{0};
};

}  // namespace trainscope::telemetry

// The OTLP/gRPC exporter: SpanData -> ExportTraceServiceRequest, sent with a deadline; and the
// OTEL_* variables that configure it. See otlp_exporter.h.
#include "trainscope/telemetry/otlp_exporter.h"

#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.grpc.pb.h"
#include "trainscope/common/cluster_spec.h"
#include "trainscope/common/grpc_channel.h"
#include "trainscope/common/grpc_tls.h"

namespace trainscope::telemetry {
namespace {

namespace otlp_collector = ::opentelemetry::proto::collector::trace::v1;
namespace otlp_common = ::opentelemetry::proto::common::v1;
namespace otlp_trace = ::opentelemetry::proto::trace::v1;

std::string Quoted(absl::string_view text) { return absl::StrCat("\"", text, "\""); }

void AppendWarning(std::string* warnings, absl::string_view text) {
  absl::StrAppend(warnings, warnings->empty() ? "" : "; ", text);
}

const char* GetEnv(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : nullptr;
}

// Decodes %XX escapes; nullopt on a malformed escape.
std::optional<std::string> PercentDecode(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    if (i + 2 >= text.size() || !absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 1])) ||
        !absl::ascii_isxdigit(static_cast<unsigned char>(text[i + 2]))) {
      return std::nullopt;
    }
    auto digit = [](char c) {
      return absl::ascii_isdigit(static_cast<unsigned char>(c))
                 ? c - '0'
                 : absl::ascii_tolower(static_cast<unsigned char>(c)) - 'a' + 10;
    };
    out.push_back(static_cast<char>(digit(text[i + 1]) << 4 | digit(text[i + 2])));
    i += 2;
  }
  return out;
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof(buf) - 1) != 0) return "unknown";
  return buf;
}

// Sets `key` to `value` in `attributes`, replacing an attribute of that key.
void Upsert(std::vector<Attribute>* attributes, Attribute attribute) {
  for (Attribute& a : *attributes) {
    if (a.key == attribute.key) {
      a.value = std::move(attribute.value);
      return;
    }
  }
  attributes->push_back(std::move(attribute));
}

void ToProto(const Attribute& attribute, otlp_common::KeyValue* out) {
  out->set_key(attribute.key);
  otlp_common::AnyValue* value = out->mutable_value();
  std::visit(
      [value](const auto& v) {
        using T = std::decay_t<decltype(v)>;
        if constexpr (std::is_same_v<T, std::string>) {
          value->set_string_value(v);
        } else if constexpr (std::is_same_v<T, int64_t>) {
          value->set_int_value(v);
        } else if constexpr (std::is_same_v<T, double>) {
          value->set_double_value(v);
        } else {
          value->set_bool_value(v);
        }
      },
      attribute.value);
}

template <typename Bytes>
void SetBytes(const Bytes& bytes, std::string* out) {
  out->assign(reinterpret_cast<const char*>(bytes.data()), bytes.size());
}

void ToProto(const SpanData& span, otlp_trace::Span* out) {
  SetBytes(span.context.trace_id, out->mutable_trace_id());
  SetBytes(span.context.span_id, out->mutable_span_id());
  bool root = true;
  for (uint8_t b : span.parent_span_id) root = root && b == 0;
  if (!root) SetBytes(span.parent_span_id, out->mutable_parent_span_id());
  out->set_flags(span.context.sampled ? 0x01 : 0x00);
  out->set_name(span.name);
  out->set_kind(static_cast<otlp_trace::Span::SpanKind>(static_cast<int>(span.kind)));
  out->set_start_time_unix_nano(span.start_unix_nano);
  out->set_end_time_unix_nano(span.end_unix_nano);
  out->mutable_attributes()->Reserve(static_cast<int>(span.attributes.size()));
  for (const Attribute& a : span.attributes) ToProto(a, out->add_attributes());
  for (const SpanEvent& event : span.events) {
    otlp_trace::Span::Event* e = out->add_events();
    e->set_time_unix_nano(event.time_unix_nano);
    e->set_name(event.name);
    for (const Attribute& a : event.attributes) ToProto(a, e->add_attributes());
  }
  if (span.status_code != kStatusUnset || !span.status_message.empty()) {
    otlp_trace::Status* status = out->mutable_status();
    if (span.status_code == kStatusOk || span.status_code == kStatusError) {
      status->set_code(static_cast<otlp_trace::Status::StatusCode>(span.status_code));
    }
    status->set_message(span.status_message);
  }
}

// The endpoint and timeout from OTEL_EXPORTER_OTLP_TRACES_* (else OTEL_EXPORTER_OTLP_*); a
// timeout that is not a positive number is warned about and left at its default.
void EndpointFromEnv(OtlpExporterOptions* options, std::string* warnings) {
  if (const char* traces = GetEnv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")) {
    options->endpoint = traces;
  } else if (const char* endpoint = GetEnv("OTEL_EXPORTER_OTLP_ENDPOINT")) {
    options->endpoint = endpoint;
  }
  for (const char* name : {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "OTEL_EXPORTER_OTLP_TIMEOUT"}) {
    const char* timeout = GetEnv(name);
    if (timeout == nullptr) continue;
    int ms = 0;
    if (absl::SimpleAtoi(timeout, &ms) && ms > 0) {
      options->timeout_ms = ms;
    } else {
      AppendWarning(warnings, absl::StrCat(name, "=", Quoted(timeout),
                                           " is not a positive number of milliseconds; using ",
                                           options->timeout_ms));
    }
    break;
  }
}

// OTEL_RESOURCE_ATTRIBUTES into options->resource_attributes, a malformed entry warned about and
// skipped; returns its service.name ("" when it gives none), which is not an attribute here.
std::string ResourceAttributesFromEnv(OtlpExporterOptions* options, std::string* warnings) {
  std::string service_from_attributes;
  const char* attributes = GetEnv("OTEL_RESOURCE_ATTRIBUTES");
  if (attributes == nullptr) return service_from_attributes;
  for (absl::string_view entry : absl::StrSplit(attributes, ',', absl::SkipWhitespace())) {
    const size_t eq = entry.find('=');
    std::optional<std::string> key;
    std::optional<std::string> value;
    if (eq != absl::string_view::npos) {
      key = PercentDecode(absl::StripAsciiWhitespace(entry.substr(0, eq)));
      value = PercentDecode(absl::StripAsciiWhitespace(entry.substr(eq + 1)));
    }
    if (!key || !value || key->empty()) {
      AppendWarning(warnings, absl::StrCat("OTEL_RESOURCE_ATTRIBUTES: skipped ", Quoted(entry),
                                           " (expected key=value, with %XX escapes only)"));
      continue;
    }
    if (*key == "service.name") {
      service_from_attributes = *value;
    } else {
      Upsert(&options->resource_attributes, {*key, *value});
    }
  }
  return service_from_attributes;
}

}  // namespace

absl::StatusOr<std::string> ParseOtlpEndpoint(absl::string_view endpoint) {
  absl::string_view text = absl::StripAsciiWhitespace(endpoint);
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad OTLP endpoint ", Quoted(endpoint), ": ", why));
  };
  if (text.empty()) return bad("empty; expected http://host:port");
  const size_t scheme_end = text.find("://");
  if (scheme_end != absl::string_view::npos) {
    const std::string scheme = absl::AsciiStrToLower(text.substr(0, scheme_end));
    if (scheme == "https") {
      return bad(
          "https:// is not how TLS is asked for here: use http://host:port (e.g. the node's "
          "sidecar) and the --tls_* flags, which cover the export (docs/security.md)");
    }
    if (scheme != "http")
      return bad(absl::StrCat("scheme ", Quoted(scheme),
                              " not supported; "
                              "expected http://host:port"));
    text.remove_prefix(scheme_end + 3);
  }
  if (absl::EndsWith(text, "/")) text.remove_suffix(1);
  if (text.find('/') != absl::string_view::npos) {
    return bad(
        "has a path; OTLP/gRPC takes http://host:port (a path like /v1/traces is "
        "OTLP/HTTP, which trainscope does not speak)");
  }
  if (text.empty()) return bad("no host; expected http://host:port");
  std::string address(text);
  const bool bracketed = text.front() == '[';
  const bool has_port = bracketed ? absl::StrContains(text, "]:") : absl::StrContains(text, ':');
  if (!has_port) absl::StrAppend(&address, ":", kOtlpGrpcPort);
  if (auto parsed = ParseHostPort(address); !parsed.ok()) return bad(parsed.status().message());
  return address;
}

OtlpExporterOptions OtlpOptionsFromEnv(absl::string_view cluster, absl::string_view role, int task,
                                       std::string* warning) {
  OtlpExporterOptions options;
  std::string warnings;
  EndpointFromEnv(&options, &warnings);
  const std::string service_from_attributes = ResourceAttributesFromEnv(&options, &warnings);
  if (const char* service = GetEnv("OTEL_SERVICE_NAME")) {
    options.service_name = service;
  } else if (!service_from_attributes.empty()) {
    options.service_name = service_from_attributes;
  } else {
    options.service_name = absl::StrCat("trainscope-", role);
  }
  Upsert(&options.resource_attributes, {"service.name", options.service_name});
  Upsert(&options.resource_attributes, {"trainscope.cluster", std::string(cluster)});
  Upsert(&options.resource_attributes, {"trainscope.role", std::string(role)});
  Upsert(&options.resource_attributes, {"trainscope.task", static_cast<int64_t>(task)});
  Upsert(&options.resource_attributes, {"service.instance.id", absl::StrCat(role, ":", task)});
  Upsert(&options.resource_attributes, {"process.pid", static_cast<int64_t>(getpid())});
  Upsert(&options.resource_attributes, {"host.name", HostName()});
  if (warning != nullptr) *warning = std::move(warnings);
  return options;
}

struct OtlpGrpcExporter::Impl {
  OtlpExporterOptions options;
  std::string target;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<otlp_collector::TraceService::Stub> stub;
  // The resource and scope, built once; each request copies them.
  otlp_trace::ResourceSpans prototype;
};

absl::StatusOr<std::unique_ptr<OtlpGrpcExporter>> OtlpGrpcExporter::Create(
    OtlpExporterOptions options) {
  auto impl = std::make_unique<Impl>();
  absl::StatusOr<std::string> target = ParseOtlpEndpoint(options.endpoint);
  if (!target.ok()) return target.status();
  impl->target = *std::move(target);
  if (options.timeout_ms <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OTLP export timeout must be positive, not ", options.timeout_ms, " ms"));
  }
  auto credentials = ::trainscope::MakeChannelCredentials(options.tls);
  if (!credentials.ok()) return credentials.status();
  // A collector that comes back is found again within seconds. No keepalive: each export has
  // its own deadline.
  impl->channel = MakeChannel(
      impl->target, {.keepalive_time_ms = 0, .min_reconnect_ms = 500, .max_reconnect_ms = 5000},
      *credentials);
  impl->stub = otlp_collector::TraceService::NewStub(impl->channel);

  auto* resource = impl->prototype.mutable_resource();
  std::vector<Attribute> attributes;
  if (!options.service_name.empty()) attributes.push_back({"service.name", options.service_name});
  for (const Attribute& a : options.resource_attributes) {
    if (a.key == "service.name" && !options.service_name.empty()) continue;
    Upsert(&attributes, a);
  }
  for (const Attribute& a : attributes) ToProto(a, resource->add_attributes());
  impl->prototype.add_scope_spans()->mutable_scope()->set_name(kInstrumentationScope);
  impl->options = std::move(options);
  return std::unique_ptr<OtlpGrpcExporter>(new OtlpGrpcExporter(std::move(impl)));
}

OtlpGrpcExporter::OtlpGrpcExporter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

OtlpGrpcExporter::~OtlpGrpcExporter() = default;

const std::string& OtlpGrpcExporter::target() const { return impl_->target; }

absl::Status OtlpGrpcExporter::Export(std::vector<SpanData>& batch) {
  if (batch.empty()) return absl::OkStatus();
  otlp_collector::ExportTraceServiceRequest request;
  otlp_trace::ResourceSpans* resource_spans = request.add_resource_spans();
  *resource_spans = impl_->prototype;
  otlp_trace::ScopeSpans* scope_spans = resource_spans->mutable_scope_spans(0);
  scope_spans->mutable_spans()->Reserve(static_cast<int>(batch.size()));
  for (const SpanData& span : batch) ToProto(span, scope_spans->add_spans());

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() +
                       std::chrono::milliseconds(impl_->options.timeout_ms));
  otlp_collector::ExportTraceServiceResponse response;
  grpc::Status status = impl_->stub->Export(&context, request, &response);
  if (!status.ok()) {
    // gRPC and abseil share the canonical codes.
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("OTLP export of ", batch.size(), " spans to ", impl_->target,
                                     " failed: ", status.error_message()));
  }
  if (response.has_partial_success() && response.partial_success().rejected_spans() > 0) {
    rejected_spans_.fetch_add(static_cast<uint64_t>(response.partial_success().rejected_spans()),
                              std::memory_order_relaxed);
  }
  return absl::OkStatus();
}

}  // namespace trainscope::telemetry

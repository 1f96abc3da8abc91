// OTLP conversion at the sidecar's edge: valid spans become SpanRecords with their resource's
// task; spans with missing or wrongly sized ids are skipped and counted, never a crash.
#include "trainscope/sidecar/trace_receiver.h"

#include <gtest/gtest.h>

#include "grpcpp/grpcpp.h"

namespace trainscope::sidecar {
namespace {

namespace otlp_trace = ::opentelemetry::proto::trace::v1;

void Attr(google::protobuf::RepeatedPtrField<::opentelemetry::proto::common::v1::KeyValue>* attrs,
          const std::string& key, const std::string& value) {
  auto* kv = attrs->Add();
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

void IntAttr(
    google::protobuf::RepeatedPtrField<::opentelemetry::proto::common::v1::KeyValue>* attrs,
    const std::string& key, int64_t value) {
  auto* kv = attrs->Add();
  kv->set_key(key);
  kv->mutable_value()->set_int_value(value);
}

otlp_trace::Span* AddSpan(otlp::ExportTraceServiceRequest& req, std::string trace_id,
                          std::string span_id, std::string parent = "") {
  if (req.resource_spans_size() == 0) {
    auto* rs = req.add_resource_spans();
    Attr(rs->mutable_resource()->mutable_attributes(), "service.name", "trainscope-worker");
    Attr(rs->mutable_resource()->mutable_attributes(), "trainscope.role", "worker");
    IntAttr(rs->mutable_resource()->mutable_attributes(), "trainscope.task", 3);
    rs->add_scope_spans();
  }
  auto* s = req.mutable_resource_spans(0)->mutable_scope_spans(0)->add_spans();
  s->set_trace_id(trace_id);
  s->set_span_id(span_id);
  s->set_parent_span_id(parent);
  return s;
}

TEST(TraceReceiver, ConvertsValidSpans) {
  otlp::ExportTraceServiceRequest req;
  auto* s = AddSpan(req, std::string(15, '\0') + "\x01", std::string(7, '\0') + "\x02",
                    std::string(8, '\0'));
  s->set_name("trainscope.v1.ParameterService/Pull");
  s->set_kind(otlp_trace::Span::SPAN_KIND_CLIENT);
  s->set_start_time_unix_nano(1000);
  s->set_end_time_unix_nano(5000);
  s->mutable_status()->set_code(otlp_trace::Status::STATUS_CODE_ERROR);
  s->mutable_status()->set_message("Deadline Exceeded");
  IntAttr(s->mutable_attributes(), "rpc.grpc.status_code", 4);
  Attr(s->mutable_attributes(), "trainscope.peer_task", "ps:1");
  IntAttr(s->mutable_attributes(), "rpc.deadline_ms", 2000);
  auto* ev = s->add_events();
  ev->set_name("ps.queue");
  IntAttr(ev->mutable_attributes(), "duration_ns", 777);

  ConvertResult c = ConvertExport(req);
  EXPECT_EQ(c.total, 1);
  EXPECT_EQ(c.invalid, 0);
  ASSERT_EQ(c.spans.size(), 1u);
  const SpanRecord& r = c.spans[0];
  EXPECT_EQ(r.trace_id, "00000000000000000000000000000001");
  EXPECT_EQ(r.span_id, "0000000000000002");
  EXPECT_EQ(r.parent_span_id, "");  // All-zero parent: a root span.
  EXPECT_EQ(r.kind, SpanKind::kClient);
  EXPECT_EQ(r.task, "worker:3");
  EXPECT_EQ(r.service_name, "trainscope-worker");
  EXPECT_EQ(r.peer_task, "ps:1");
  EXPECT_EQ(r.grpc_status_code, 4);
  EXPECT_EQ(r.deadline_ms, 2000);
  EXPECT_EQ(r.DurationNs(), 4000);
  EXPECT_TRUE(r.IsError());
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].duration_ns, 777);
}

TEST(TraceReceiver, SkipsSpansWithBadIds) {
  otlp::ExportTraceServiceRequest req;
  const std::string trace(16, '\x07');
  const std::string span(8, '\x09');
  AddSpan(req, "", span);                                         // Missing trace id.
  AddSpan(req, std::string(3, '\x01'), span);                     // Short trace id.
  AddSpan(req, std::string(16, '\0'), span);                      // All-zero trace id.
  AddSpan(req, trace, std::string(8, '\0'));                      // All-zero span id.
  AddSpan(req, trace, std::string(9, '\x01'));                    // Long span id.
  AddSpan(req, trace, span, std::string(5, 'x'));                 // Bad parent id.
  AddSpan(req, trace, span)->set_name(std::string(100000, 'n'));  // Fine, name cut short.
  ConvertResult c = ConvertExport(req);
  EXPECT_EQ(c.total, 7);
  EXPECT_EQ(c.invalid, 6);
  ASSERT_EQ(c.spans.size(), 1u);
  EXPECT_LE(c.spans[0].name.size(), 256u);
  EXPECT_EQ(c.first_error, "span skipped: trace_id of 0 bytes (want 16)");
}

// Export as a client on this node reaches it: over a real gRPC server on loopback.
TEST(TraceReceiver, ExportAnswersPartialSuccessAndStores) {
  TraceStore store;
  TraceReceiver receiver(&store, nullptr, SpanSenders{});
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&receiver);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(port, 0);
  auto stub = otlp::TraceService::NewStub(
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials()));
  otlp::ExportTraceServiceRequest req;
  AddSpan(req, std::string(16, '\x07'), std::string(8, '\x09'))
      ->set_kind(otlp_trace::Span::SPAN_KIND_CLIENT);
  AddSpan(req, "bad", std::string(8, '\x09'));
  otlp::ExportTraceServiceResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status status = stub->Export(&ctx, req, &resp);
  EXPECT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(resp.partial_success().rejected_spans(), 1);
  EXPECT_EQ(receiver.stats().spans_received, 2);
  EXPECT_EQ(receiver.stats().spans_invalid, 1);
  EXPECT_EQ(receiver.stats().refused, 0);
  EXPECT_EQ(store.stats().spans_kept, 1);
  server->Shutdown();
}

// Who counts as this node: a table of gRPC peer strings (refusals from another node on real
// sockets: tests/multinode/forgery_test.py).
TEST(TraceReceiver, OnlyThisNodeSendsSpans) {
  const SpanSenders senders{{"10.213.5.1", "fd00::5"}};
  struct Case {
    const char* peer;
    bool local;
  };
  const Case cases[] = {
      {"ipv4:127.0.0.1:4000", true},
      {"ipv4:127.0.0.9:1", true},
      {"ipv4:10.213.5.1:5", true},
      {"ipv4:10.213.5.2:5", false},
      {"ipv4:10.213.5.10:5", false},
      {"ipv6:[::1]:5", true},
      {"ipv6:%5B::1%5D:5", true},
      {"ipv6:[fd00::5]:5", true},
      {"ipv6:%5Bfd00::5%5D:5", true},
      {"ipv6:[fd00::6]:5", false},
      {"ipv6:[::ffff:127.0.0.1]:5", true},
      {"ipv6:[::ffff:10.213.5.1]:5", true},
      {"ipv6:[::ffff:10.213.5.3]:5", false},
      {"ipv6:[fe80::1%25eth0]:5", false},
      {"unix:/run/trainscope.sock", true},
      {"", false},
      {"ipv4:", false},
      {"ipv4:garbage", false},
      {"ipv4:999.1.1.1:5", false},
      {"ipv6:::1:5", false},
      {"inproc:x", false},
  };
  for (const Case& c : cases) EXPECT_EQ(IsNodeLocalPeer(c.peer, senders), c.local) << c.peer;
}

TEST(TraceReceiver, ForwarderRejectsBadEndpointsAndDropsWhenFull) {
  EXPECT_FALSE(OtlpForwarder::Create("grpc://x:1", 1024).ok());
  EXPECT_FALSE(OtlpForwarder::Create("http://nohost", 1024).ok());
  auto f = OtlpForwarder::Create("http://127.0.0.1:1", 10);  // Nothing listens at port 1.
  ASSERT_TRUE(f.ok()) << f.status();
  otlp::ExportTraceServiceRequest req;
  AddSpan(req, std::string(16, '\x07'), std::string(8, '\x09'));
  EXPECT_FALSE((*f)->Enqueue(req, 1));  // Larger than the whole queue.
  EXPECT_EQ((*f)->stats().dropped_spans, 1);
}

}  // namespace
}  // namespace trainscope::sidecar

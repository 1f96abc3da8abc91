// Writes the seed corpora of the protobuf fuzzers (tests/fuzz/corpus/<target>/) from real
// messages: the exchange's are what ExchangeCore itself sends and answers between three nodes;
// heartbeats and Export requests are filled field by field as the runtime fills them
// (task_service.cc FillHeartbeat, otlp_exporter.cc). Run by hand when the messages change:
//   build-fuzz/bin/fuzz_seed_writer tests/fuzz/corpus
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "fuzz_records.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "trainscope/sidecar/exchange_core.h"
#include "trainscope/v1/runtime.pb.h"

namespace {

namespace fs = std::filesystem;
namespace pb = ::trainscope::v1;
namespace sv1 = ::trainscope::sidecar::v1;
namespace otlp = ::opentelemetry::proto::collector::trace::v1;
using trainscope::fuzz::EncodeRecord;
using trainscope::sidecar::ExchangeCore;
using trainscope::sidecar::Now;

void Write(const fs::path& dir, const std::string& name, const std::string& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary) << bytes;
}

pb::HeartbeatResponse Heartbeat(int64_t steps, bool waiting, bool ps) {
  pb::HeartbeatResponse r;
  pb::TaskIdentity* id = r.mutable_identity();
  id->set_cluster_name("demo");
  id->mutable_task()->set_role("worker");
  id->mutable_task()->set_index(0);
  id->set_incarnation(1700000000123);
  id->set_pid(4242);
  id->set_hostname("fuzzhost");
  id->set_listen_address("127.0.0.1:2223");
  id->set_runtime_version("0.1.0");
  r.set_phase(pb::PHASE_TRAINING);
  r.set_steps(steps);
  for (int i = 0; i < 2; ++i) {
    pb::PeerView* peer = waiting ? r.mutable_waiting()->add_peers() : r.add_peers();
    peer->mutable_peer()->set_role("ps");
    peer->mutable_peer()->set_index(i);
    peer->set_address("127.0.0.1:222" + std::to_string(i));
    peer->set_connected(!waiting);
    peer->set_latency_seconds(0.002);
    peer->set_step_share(0.5);
    if (waiting) {
      peer->set_last_error("connection timed out");
      peer->set_consecutive_failures(3);
      peer->set_network_failure(true);
      peer->set_seconds_failing(0.4);
    }
  }
  if (waiting) {
    r.mutable_waiting()->set_what("parameter servers");
    r.mutable_waiting()->set_since_unix_seconds(1.7e9);
  }
  r.mutable_resources()->set_cpu_seconds(1.5);
  r.mutable_resources()->set_resident_bytes(50 << 20);
  r.mutable_resources()->set_threads(12);
  r.mutable_resources()->set_open_fds(30);
  r.set_unix_seconds(1.7e9 + steps * 0.1);
  r.set_metrics_address("127.0.0.1:9100");
  r.set_last_step_seconds(0.1);
  r.set_last_step_recovered(steps % 5 == 0);
  r.set_expects_progress(true);
  if (ps) {
    r.mutable_serving()->set_calls(steps * 2);
    r.mutable_serving()->set_seconds(steps * 0.001);
    r.mutable_serving()->set_queue_seconds(steps * 0.0002);
    r.mutable_serving()->set_work_seconds(steps * 0.0008);
  }
  return r;
}

// Polls 0x00: on time, process sleeping; 0x09: a second late... (see heartbeat_fuzzer.cc).
void WriteHeartbeats(const fs::path& dir) {
  std::string steady, stalled, waiting;
  for (int i = 0; i < 12; ++i) {
    steady += EncodeRecord(0x00, Heartbeat(10 + i, false, true).SerializeAsString());
    stalled += EncodeRecord(i < 6 ? 0x00 : 0x0f, Heartbeat(10, false, false).SerializeAsString());
    waiting += EncodeRecord(0x08, Heartbeat(3, i > 3, false).SerializeAsString());
  }
  Write(dir, "steady", steady);
  Write(dir, "stalled_then_slow", stalled);
  Write(dir, "waiting_on_ps", waiting);
  // Garbage, an answer without identity, then silence and a dead process.
  Write(dir, "garbage_then_dead",
        EncodeRecord(0x00, Heartbeat(1, false, false).SerializeAsString()) +
            EncodeRecord(0x00, "\x08\x96\x01garbage") + EncodeRecord(0x00, "") +
            EncodeRecord(0xc7, Heartbeat(1, false, false).SerializeAsString()));
}

void Attribute(opentelemetry::proto::common::v1::KeyValue* kv, const std::string& key,
               const std::string& value) {
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

// One Push: the worker's client span and the ps's server span, as two resources.
otlp::ExportTraceServiceRequest ExportRequest(bool error) {
  otlp::ExportTraceServiceRequest request;
  const std::string trace_id("\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36",
                             16);
  const char* roles[] = {"worker", "ps"};
  for (int side = 0; side < 2; ++side) {
    auto* rs = request.add_resource_spans();
    Attribute(rs->mutable_resource()->add_attributes(), "service.name", "trainscope");
    Attribute(rs->mutable_resource()->add_attributes(), "service.instance.id",
              std::string(roles[side]) + ":0");
    Attribute(rs->mutable_resource()->add_attributes(), "trainscope.role", roles[side]);
    auto* task = rs->mutable_resource()->add_attributes();
    task->set_key("trainscope.task");
    task->mutable_value()->set_int_value(0);
    auto* span = rs->add_scope_spans()->add_spans();
    span->set_trace_id(trace_id);
    span->set_span_id(std::string(
        side == 0 ? "\x00\xf0\x67\xaa\x0b\xa9\x02\xb7" : "\x11\x22\x33\x44\x55\x66\x77\x88", 8));
    if (side == 1) span->set_parent_span_id(std::string("\x00\xf0\x67\xaa\x0b\xa9\x02\xb7", 8));
    span->set_name("trainscope.v1.ParameterService/Push");
    span->set_kind(side == 0 ? opentelemetry::proto::trace::v1::Span::SPAN_KIND_CLIENT
                             : opentelemetry::proto::trace::v1::Span::SPAN_KIND_SERVER);
    span->set_start_time_unix_nano(1700000000000000000ull + side * 1000);
    span->set_end_time_unix_nano(1700000000250000000ull - side * 1000);
    Attribute(span->add_attributes(), "rpc.method", "Push");
    Attribute(span->add_attributes(), "trainscope.peer_task", side == 0 ? "ps:0" : "worker:0");
    Attribute(span->add_attributes(), "net.peer.name", "127.0.0.1:2222");
    auto* code = span->add_attributes();
    code->set_key("rpc.grpc.status_code");
    code->mutable_value()->set_int_value(error ? 4 : 0);
    auto* deadline = span->add_attributes();
    deadline->set_key("rpc.deadline_ms");
    deadline->mutable_value()->set_double_value(200);
    Attribute(span->add_attributes(), "trainscope.kept", "slow");
    auto* event = span->add_events();
    event->set_name("queued");
    event->set_time_unix_nano(1700000000100000000ull);
    auto* duration = event->add_attributes();
    duration->set_key("duration_ns");
    duration->mutable_value()->set_int_value(5000000);
    if (error) {
      span->mutable_status()->set_code(opentelemetry::proto::trace::v1::Status::STATUS_CODE_ERROR);
      span->mutable_status()->set_message("Deadline Exceeded");
    }
  }
  return request;
}

void WriteExports(const fs::path& dir) {
  Write(dir, "push_ok", ExportRequest(false).SerializeAsString());
  Write(dir, "push_deadline_exceeded", ExportRequest(true).SerializeAsString());
  auto bad = ExportRequest(false);
  bad.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->set_trace_id("short");
  Write(dir, "bad_trace_id", bad.SerializeAsString());
}

std::unique_ptr<ExchangeCore> Node(const std::string& self, Now now) {
  trainscope::sidecar::ExchangeOptions o;
  o.cluster = "fuzz";
  o.self = self;
  o.hostname = self.substr(0, 1);
  o.peers = {"a:1", "b:1", "c:1"};
  o.seed = 7;
  auto core = std::make_unique<ExchangeCore>(o, 1, now);
  trainscope::sidecar::TaskView view;
  view.cluster = "fuzz";
  view.task = {"worker", self[0] - 'a'};
  view.state =
      self == "c:1" ? trainscope::sidecar::TaskState::kHung : trainscope::sidecar::TaskState::kUp;
  view.phase = "training";
  core->UpdateOwn({view}, now);
  return core;
}

// A seed the fuzzed node would refuse is no seed: stop at once.
void Must(const std::string& refused) {
  if (refused.empty()) return;
  std::cerr << "a seed message was refused: " << refused << "\n";
  std::exit(1);
}

// Real messages between a:1 (the fuzzed node), b:1 and c:1, framed as the fuzzer reads them.
void WriteExchange(const fs::path& dir) {
  Now now{100, 1.7e9};
  auto a_node = Node("a:1", now), b_node = Node("b:1", now), c_node = Node("c:1", now);
  ExchangeCore &a = *a_node, &b = *b_node, &c = *c_node;
  // b learns c's record first, so what b sends a carries news.
  sv1::PingRequest cb;
  sv1::PingResponse bc;
  c.FillPing("b:1", &cb);
  Must(b.OnPing(cb, &bc, now));
  c.OnPingDone("b:1", true, "", bc, now);
  auto tag = [](int t, const google::protobuf::Message& m) {
    // The high bit: signed with the cluster key in the fuzzer (a member's message).
    return EncodeRecord(static_cast<uint8_t>(0x80 | t), m.SerializeAsString());
  };
  sv1::PingRequest ping;  // b -> a
  b.FillPing("a:1", &ping);
  sv1::PingReqRequest pingreq;  // b asks a to probe c
  b.FillPingReq("c:1", &pingreq);
  sv1::SyncRequest sync;  // b -> a
  b.FillSync(&sync);
  sv1::PingRequest a_ping;  // a -> b, and b's answer
  sv1::PingResponse pong;
  a.FillPing("b:1", &a_ping);
  Must(b.OnPing(a_ping, &pong, now));
  sv1::PingReqRequest a_pingreq;  // a asks b to probe c, and b's answer
  sv1::PingReqResponse pingreq_answer;
  a.FillPingReq("c:1", &a_pingreq);
  Must(b.OnPingReq(a_pingreq, now));
  b.FillPingReqAnswer(true, "", &pingreq_answer);
  sv1::SyncRequest a_sync;  // a -> b, and b's answer
  sv1::SyncResponse sync_answer;
  a.FillSync(&a_sync);
  Must(b.OnSync(a_sync, &sync_answer, now));
  // The fuzzed node takes every one of them (a fresh a:1, as in the fuzzer).
  auto fresh = Node("a:1", now);
  sv1::PingResponse ignored_pong;
  sv1::SyncResponse ignored_sync;
  Must(fresh->OnPing(ping, &ignored_pong, now));
  Must(fresh->OnPingReq(pingreq, now));
  Must(fresh->OnSync(sync, &ignored_sync, now));
  Must(fresh->CheckHeader(pong.header(), 2e9));
  Must(fresh->CheckHeader(pingreq_answer.header(), 2e9));
  Must(fresh->CheckHeader(sync_answer.header(), 2e9));
  Write(dir, "ping", tag(0, ping));
  Write(dir, "forged_ping", EncodeRecord(0, ping.SerializeAsString()));  // Unsigned: refused.
  Write(dir, "pingreq", tag(1, pingreq));
  Write(dir, "sync", tag(2, sync));
  Write(dir, "ping_answer", tag(3, pong));
  Write(dir, "pingreq_answer", tag(4, pingreq_answer));
  Write(dir, "sync_answer", tag(5, sync_answer));
  Write(dir, "conversation",
        tag(0, ping) + tag(3, pong) + EncodeRecord(6, "") + tag(2, sync) + tag(5, sync_answer) +
            tag(1, pingreq) + tag(4, pingreq_answer) + EncodeRecord(6, "x"));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: fuzz_seed_writer <corpus dir>\n";
    return 2;
  }
  const fs::path root = argv[1];
  WriteHeartbeats(root / "heartbeat");
  WriteExports(root / "otlp_export");
  WriteExchange(root / "exchange");
  return 0;
}

// libFuzzer target: the sidecar-to-sidecar exchange (sidecar/gossip/src/exchange_core.cc) as a peer
// drives it: Ping, PingReq and Sync requests the node serves, and the answers to the ones it
// sent, all bytes a peer chooses. Each record of the input (fuzz_records.h) is one message; its
// tag says which (see kTag*), the payload is the serialized protobuf. The node is "a:1" of
// cluster "fuzz" with members b:1 and c:1; the answers are to its calls to b:1 (and, through
// b:1, to c:1). A fresh node per input, so every crash replays from its input alone.
// The exchange is keyed (exchange_keys.h), as PeerExchange runs it: a record whose tag has its
// high bit set is signed with the cluster key before it is checked (a member's message, which
// reaches the protocol), any other is checked as it came (a forger's, which the key refuses).
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_records.h"
#include "google/protobuf/stubs/logging.h"
#include "trainscope/sidecar/exchange_core.h"
#include "trainscope/sidecar/exchange_keys.h"

namespace {

namespace v1 = ::trainscope::sidecar::v1;
using trainscope::sidecar::ExchangeCore;
using trainscope::sidecar::Now;

// What a record's payload is (tag modulo kNumTags).
enum Tag : uint8_t {
  kTagPingRequest = 0,
  kTagPingReqRequest = 1,
  kTagSyncRequest = 2,
  kTagPingResponse = 3,
  kTagPingReqResponse = 4,
  kTagSyncResponse = 5,
  kTagPeriod = 6,  // No payload: a period passes (probes, gossip, snapshot).
  kNumTags = 7,
};

constexpr double kStartUnix = 1.7e9;
constexpr uint8_t kSignedBit = 0x80;

trainscope::sidecar::ExchangeKeys& Keys() {
  static auto keys =
      *trainscope::sidecar::ExchangeKeys::FromSecrets({"fuzz-cluster-key-0123456789"});
  return *keys;
}

// Whether a message from the network passes the key: signed first when `member`.
bool Admit(google::protobuf::Message* message, bool member, Now now) {
  if (member) Keys().Sign(message, now.unix);
  return Keys().Verify(*message, now.unix).ok();
}

trainscope::sidecar::ExchangeOptions Options() {
  trainscope::sidecar::ExchangeOptions o;
  o.cluster = "fuzz";
  o.self = "a:1";
  o.hostname = "a";
  o.peers = {"a:1", "b:1", "c:1"};
  o.seed = 1;
  return o;
}

template <typename Message>
bool Parse(absl::string_view payload, Message* message) {
  return message->ParseFromArray(payload.data(), static_cast<int>(payload.size()));
}

// A request served, as PeerExchange's handlers take it.
void Serve(ExchangeCore& core, uint8_t tag, bool member, absl::string_view payload, Now now) {
  if (tag == kTagPingRequest) {
    v1::PingRequest req;
    v1::PingResponse resp;
    if (Parse(payload, &req) && Admit(&req, member, now)) core.OnPing(req, &resp, now);
  } else if (tag == kTagPingReqRequest) {
    v1::PingReqRequest req;
    v1::PingReqResponse resp;
    if (!Parse(payload, &req) || !Admit(&req, member, now) || !core.OnPingReq(req, now).empty()) {
      return;
    }
    v1::PingRequest ping;  // The probe sent on the asker's behalf; it gets no answer here.
    core.FillPing(req.target(), &ping);
    core.OnPingDone(req.target(), false, "deadline exceeded", v1::PingResponse{}, now);
    core.FillPingReqAnswer(false, "deadline exceeded", &resp);
  } else if (tag == kTagSyncRequest) {
    v1::SyncRequest req;
    v1::SyncResponse resp;
    if (Parse(payload, &req) && Admit(&req, member, now)) core.OnSync(req, &resp, now);
  }
}

// An answer to a call this node made (the call is filled first, as the transport does).
void Answer(ExchangeCore& core, uint8_t tag, bool member, absl::string_view payload, Now now) {
  if (tag == kTagPingResponse) {
    v1::PingRequest req;
    v1::PingResponse resp;
    core.FillPing("b:1", &req);
    if (!Parse(payload, &resp) || !Admit(&resp, member, now)) return;
    for (const std::string& helper : core.OnPingDone("b:1", true, "", resp, now)) {
      v1::PingReqRequest indirect;
      core.FillPingReq("b:1", &indirect);
      core.OnPingReqDone(helper, "b:1", "deadline exceeded", v1::PingReqResponse{}, now);
    }
  } else if (tag == kTagPingReqResponse) {
    v1::PingReqRequest req;
    v1::PingReqResponse resp;
    core.FillPingReq("c:1", &req);
    if (Parse(payload, &resp) && Admit(&resp, member, now)) {
      core.OnPingReqDone("b:1", "c:1", "", resp, now);
    }
  } else if (tag == kTagSyncResponse) {
    v1::SyncRequest req;
    v1::SyncResponse resp;
    core.FillSync(&req);
    if (Parse(payload, &resp) && Admit(&resp, member, now))
      core.OnSyncDone("b:1", req, "", resp, now);
  }
}

}  // namespace

// Protobuf logs every string field with invalid UTF-8 it refuses; at fuzzing speed that is noise.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Now now{100, kStartUnix};
  ExchangeCore core(Options(), 1, now);
  trainscope::sidecar::TaskView view;
  view.cluster = "fuzz";
  view.task = {"worker", 0};
  view.state = trainscope::sidecar::TaskState::kUp;
  view.phase = "training";
  core.UpdateOwn({view}, now);
  trainscope::fuzz::RecordReader reader(data, size);
  trainscope::fuzz::Record record;
  for (int messages = 0; messages < 32 && reader.Next(&record); ++messages) {
    now.s += 0.2;
    now.unix += 0.2;
    const uint8_t tag = (record.tag & ~kSignedBit) % kNumTags;
    const bool member = (record.tag & kSignedBit) != 0;
    if (tag == kTagPeriod) {
      (void)core.OnPeriod(now, record.payload.size() % 2 == 1);
      (void)core.Snapshot(now);
    } else if (tag <= kTagSyncRequest) {
      Serve(core, tag, member, record.payload, now);
    } else {
      Answer(core, tag, member, record.payload, now);
    }
    (void)core.TakeLog();
  }
  (void)core.Snapshot(now);
  return 0;
}

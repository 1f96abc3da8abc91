// /api/v1/stacks as text and JSON: what trainscopectl stacks prints, and the JSON that carries it
// between sidecars and to scripts.
#include <gtest/gtest.h>

#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {
namespace {

pb::StackList OneSnapshot() {
  pb::StackList list;
  list.set_task("worker:0");
  pb::StackSnapshot* s = list.add_snapshots();
  s->set_task("worker:0");
  s->set_node("10.0.0.2:4317");
  s->set_pid(4242);
  s->set_command("trainer");
  s->set_process_state("S");
  s->set_taken_unix(1000);
  s->set_trigger("stalled");
  s->set_reason("steps stuck at 7 for 12 s");
  s->set_summary("main thread waiting 12 s in Pull to ps:1");
  s->set_stacks(true);
  pb::CallInFlight* call = s->add_inflight();
  call->set_method("Pull");
  call->set_peer("ps:1");
  call->set_age_seconds(12);
  call->set_tid(4242);
  pb::ThreadStack* t = s->add_threads();
  t->set_tid(4242);
  t->set_name("trainer");
  t->set_state("S");
  t->set_syscall("futex");
  *t->add_calls() = *call;
  pb::StackFrame* inner = t->add_frames();
  inner->set_pc(0x10);
  inner->set_function("__futex_abstimed_wait_common");
  inner->set_module("libc.so.6");
  pb::StackFrame* outer = t->add_frames();
  outer->set_pc(0x20);
  outer->set_function(
      "trainscope::ParameterClient::PullAll(std::vector<std::__cxx11::basic_string<char, "
      "std::char_traits<char>, std::allocator<char> >, std::allocator<std::__cxx11::basic_"
      "string<char, std::char_traits<char>, std::allocator<char> > > >*)");
  outer->set_module("trainer");
  outer->set_file("parameter_client.cc");
  outer->set_line(359);
  return list;
}

TEST(StacksText, OneBlockPerThreadInnermostFirstWithReadableNames) {
  const std::string text = StacksToText(OneSnapshot(), 1012);
  for (const char* want :
       {"=== worker:0 pid 4242 (trainer, state S) on 10.0.0.2:4317, taken 12 s ago (stalled)",
        "stuck: main thread waiting 12 s in Pull to ps:1", "in flight: Pull to ps:1, 12 s",
        "Thread 4242 \"trainer\" (S, futex)",
        "#1  0x0000000000000020 trainscope::ParameterClient::PullAll(std::vector<std::string>*) "
        "(trainer) at parameter_client.cc:359"}) {
    EXPECT_NE(text.find(want), std::string::npos) << want << "\n" << text;
  }
  EXPECT_LT(text.find("__futex_abstimed_wait_common"), text.find("PullAll"));
}

TEST(StacksText, NothingKeptSaysHowToTakeOne) {
  pb::StackList list;
  list.set_task("ps:0");
  EXPECT_NE(StacksToText(list, 0).find("no snapshot of ps:0 kept"), std::string::npos);
}

TEST(StacksJson, RoundTripsAndRefusesWhatIsNotOne) {
  auto back = ParseStackListJson(ToJson(OneSnapshot()));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->snapshots(0).threads(0).frames(1).line(), 359);
  EXPECT_EQ(back->snapshots(0).inflight(0).peer(), "ps:1");
  for (const char* bad : {"", "[]", "{\"snapshots\": 3}", "not json"}) {
    auto parsed = ParseStackListJson(bad);
    EXPECT_FALSE(parsed.ok()) << bad;
    if (!parsed.ok()) {
      EXPECT_NE(parsed.status().message().find("not a list of snapshots"), std::string::npos);
    }
  }
}

}  // namespace
}  // namespace trainscope::sidecar

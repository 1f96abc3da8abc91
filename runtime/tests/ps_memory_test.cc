// PsMemory: what a ps says of its memory, whole (handshakes, CreateVariable, heartbeats) and the
// incarnation alone (Pull and Push answers), before and after it restored a checkpoint.
#include "ps_memory.h"

#include <gtest/gtest.h>

#include <optional>
#include <string>

namespace trainscope {
namespace {

struct Restored {
  int64_t step;
  std::string from;
};

struct Case {
  std::string name;
  std::optional<Restored> restored;
  bool whole;  // Fill, else FillIncarnation.
  bool says_restored;
  int64_t step;
  std::string from;
};

TEST(PsMemoryTest, SaysWhatWasRestoredOnlyWhenWholeAndOnlyWhenSomethingWas) {
  const uint64_t incarnation = 0x1234abcd5678ef00;
  const std::vector<Case> cases = {
      {"empty, whole", std::nullopt, true, false, 0, ""},
      {"empty, incarnation", std::nullopt, false, false, 0, ""},
      {"restored, whole", Restored{420, "/ckpt/step-420"}, true, true, 420, "/ckpt/step-420"},
      {"restored, incarnation", Restored{420, "/ckpt/step-420"}, false, false, 0, ""},
      {"restored step 0, whole", Restored{0, "/ckpt/step-0"}, true, true, 0, "/ckpt/step-0"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    PsMemory memory(incarnation);
    if (c.restored) memory.SetRestored(c.restored->step, c.restored->from);
    v1::PsState state;
    state.set_restored_step(-1);  // Not cleared by Fill: shows what it sets.
    if (c.whole) {
      memory.Fill(&state);
    } else {
      memory.FillIncarnation(&state);
    }
    EXPECT_EQ(state.incarnation(), incarnation);
    EXPECT_EQ(state.restored(), c.says_restored);
    EXPECT_EQ(state.restored_step(), c.says_restored ? c.step : -1);
    EXPECT_EQ(state.restored_from(), c.from);
  }
}

}  // namespace
}  // namespace trainscope

// The status page as a browser shows it: a real sidecar alone on loopback watches real tasks, one
// of them deadlocked, and headless Chromium renders "/"; the test reads the DOM the page's script
// built from the API (browser.h): a row per task in its state, the stuck task's link to its
// stacks, the banner, and the nodes heading. Needs Debian's chromium (scripts/install-deps): fails,
// saying so, without it.
#include <gtest/gtest.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "browser.h"
#include "sidecar_harness.h"

namespace trainscope::testing {
namespace {

using sidecar::TaskState;
using std::chrono::seconds;

// One row of the page's task table, as rendered.
struct TaskRow {
  std::string state;        // The state's words ("stalled").
  std::string state_class;  // Its badge's classes ("st stalled").
  std::string stacks_href;  // The link to its stacks; "" when there is none.
  std::string stacks_words;
};

// The rows of the task table (tbody#rows), by task name ("worker:0").
std::map<std::string, TaskRow> TaskRows(const Dom& page) {
  std::map<std::string, TaskRow> rows;
  for (const std::string& tr : Elements(page.Element("rows").value_or(""), "tr")) {
    const std::vector<std::string> cells = Elements(tr, "td");
    if (cells.size() < 2) continue;
    const std::vector<std::string> name = Elements(cells[0], "b");
    const std::vector<std::string> link = Elements(cells[0], "a");
    TaskRow row;
    row.state = TextOf(cells[1]);
    row.state_class = Attribute(cells[1], "span", "class").value_or("");
    row.stacks_href = Attribute(cells[0], "a", "href").value_or("");
    row.stacks_words = link.empty() ? "" : TextOf(link[0]);
    rows[name.empty() ? "" : TextOf(name[0])] = row;
  }
  return rows;
}

TEST(SidecarStatusPageInBrowser, ShowsEachTasksStateTheStuckTasksStacksAndThisNode) {
  if (ChromiumPath().empty()) {
    GTEST_FAIL() << "chromium is not installed: run scripts/install-deps (it installs Debian's "
                    "chromium package), then this test again";
  }
  // The worker's training thread deadlocks on two mutexes; its heartbeats go on: stalled.
  StalledWorker stalled;
  ASSERT_EQ(stalled.Start(), "");
  Sidecar& sidecar = *stalled.sidecar;

  // The page polls the API every second: load it until it shows what the API says (one load,
  // unless the machine is slow enough for a load to catch a state in flux).
  const std::string url = "http://" + sidecar.http() + "/";
  const std::map<std::string, std::string> want = {{"ps:0", "up"}, {"worker:0", "stalled"}};
  std::optional<Dom> page;
  std::map<std::string, TaskRow> rows;
  const auto deadline = std::chrono::steady_clock::now() + seconds(40);
  do {
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::string> dom = RenderInChromium(url, seconds(30));
    ASSERT_TRUE(dom.ok()) << dom.status();
    std::cout << "chromium rendered " << url << " in "
              << std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count()
              << " s\n";
    page.emplace(*dom);
    rows = TaskRows(*page);
    std::map<std::string, std::string> shown;
    for (const auto& [task, row] : rows) shown[task] = row.state;
    if (shown == want) break;
  } while (std::chrono::steady_clock::now() < deadline);

  ASSERT_EQ(rows.size(), 2u) << page->html() << "\n" << sidecar.Describe();
  const TaskRow& stuck = rows["worker:0"];
  EXPECT_EQ(stuck.state, "stalled") << sidecar.Describe();
  EXPECT_EQ(stuck.state_class, "st stalled");
  EXPECT_EQ(stuck.stacks_href, "/api/v1/stacks?task=worker%3A0&format=text");
  EXPECT_EQ(stuck.stacks_words, "where it is stuck");
  const TaskRow& up = rows["ps:0"];
  EXPECT_EQ(up.state, "up") << sidecar.Describe();
  EXPECT_EQ(up.state_class, "st up");
  EXPECT_EQ(up.stacks_href, "/api/v1/stacks?task=ps%3A0&format=text&fresh=1");
  EXPECT_EQ(up.stacks_words, "stacks now");

  EXPECT_EQ(page->Text("banner"), "1 of 2 tasks need attention");
  // The page leads with the incidents, one line per root cause: the deadlocked worker's.
  const std::string incidents = page->Text("incidents");
  EXPECT_EQ(incidents.rfind("open inc-", 0), 0u) << incidents;
  EXPECT_NE(incidents.find("worker:0 stalled"), std::string::npos) << incidents;
  EXPECT_NE(incidents.find("of training"), std::string::npos) << incidents;
  // Alone, without an exchange, this node has no id in the API: the nodes heading names none
  // (never "this one is ?"), and its row is named by its hostname.
  EXPECT_EQ(page->Text("nodesub"), "(1 sidecar)");
  EXPECT_EQ(TextOf(page->html()).find("this one is ?"), std::string::npos) << page->html();
  const std::optional<sidecar::TaskView> watched =
      sidecar.WaitForState("ps:0", TaskState::kUp, seconds(10));
  ASSERT_TRUE(watched) << sidecar.Describe();
  ASSERT_TRUE(watched->node.empty() && !watched->node_hostname.empty())
      << sidecar.Get("/api/v1/tasks");
  const std::vector<std::string> nodes = Elements(page->Element("nodes").value_or(""), "tr");
  ASSERT_EQ(nodes.size(), 1u) << page->html();
  const std::vector<std::string> node_name = Elements(nodes[0], "b");
  EXPECT_EQ(node_name.empty() ? "" : TextOf(node_name[0]), watched->node_hostname) << nodes[0];
  EXPECT_NE(TextOf(nodes[0]).find("(this node)"), std::string::npos) << nodes[0];
  EXPECT_EQ(page->Text("cluster"), "cluster " + watched->cluster);
}

}  // namespace
}  // namespace trainscope::testing

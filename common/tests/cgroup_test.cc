// The cgroup readers on trees of files written by the test: v1 (as this machine mounts it) and
// v2 (which cannot be mounted here), each whole, with limits and without, and with files
// missing, empty, truncated or garbage. A bad file leaves its fact absent, never a crash.
#include "trainscope/common/cgroup.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "skip.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;
using Files = std::map<std::string, std::string>;  // Path under the root -> content.

// A temporary root holding `files`; removed with the object.
class Tree {
 public:
  explicit Tree(const Files& files) {
    std::string tmpl = (fs::temp_directory_path() / "cgroup_test.XXXXXX").string();
    root_ = mkdtemp(tmpl.data());
    for (const auto& [path, content] : files) Write(path, content);
  }
  ~Tree() { fs::remove_all(root_); }
  void Write(const std::string& path, const std::string& content) const {
    fs::path p = fs::path(root_) / path;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << content;
  }
  const std::string& root() const { return root_; }

 private:
  std::string root_;
};

constexpr char kV1Cgroup[] =
    "12:pids:/kubepods/pod1/c1\n"
    "5:memory:/kubepods/pod1/c1\n"
    "3:cpu,cpuacct:/kubepods/pod1/c1\n"
    "1:name=systemd:/kubepods/pod1/c1\n"
    "0::/kubepods/pod1/c1\n";

// A whole v1 cgroup: 256 MiB limit, 200 MiB used, one OOM kill, half a core, throttled.
Files V1Files(const std::string& mem = "memory/kubepods/pod1/c1",
              const std::string& cpu = "cpu,cpuacct/kubepods/pod1/c1") {
  return {{mem + "/memory.limit_in_bytes", "268435456\n"},
          {mem + "/memory.usage_in_bytes", "209715200\n"},
          {mem + "/memory.max_usage_in_bytes", "267386880\n"},
          {mem + "/memory.failcnt", "17\n"},
          {mem + "/memory.oom_control", "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"},
          {mem + "/memory.stat", "cache 1000\ninactive_file 5\ntotal_inactive_file 10485760\n"},
          {cpu + "/cpu.cfs_quota_us", "50000\n"},
          {cpu + "/cpu.cfs_period_us", "100000\n"},
          {cpu + "/cpu.stat",
           "nr_periods 400\nnr_throttled 244\nthrottled_time 12500000000\nnr_bursts 0\n"},
          {"unified/kubepods/pod1/c1/memory.pressure",
           "some avg10=12.50 avg60=3.00 avg300=1.00 total=1234\n"
           "full avg10=2.00 avg60=0.00 avg300=0.00 total=100\n"}};
}

TEST(CgroupTest, ParsesProcCgroupV1) {
  CgroupPaths p = ParseProcCgroup(kV1Cgroup);
  EXPECT_EQ(p.version, 1);
  EXPECT_EQ(p.memory_dir, "memory");
  EXPECT_EQ(p.memory_path, "/kubepods/pod1/c1");
  EXPECT_EQ(p.cpu_dir, "cpu,cpuacct");
  EXPECT_EQ(p.cpu_path, "/kubepods/pod1/c1");
  EXPECT_EQ(p.unified_path, "/kubepods/pod1/c1");
}

TEST(CgroupTest, ParsesProcCgroupV2AndBadLines) {
  struct Case {
    const char* text;
    int version;
    const char* memory_path;
  };
  const std::string long_line(5000, 'x');
  const Case cases[] = {
      {"0::/kubepods.slice/pod1/cri-c1.scope\n", 2, "/kubepods.slice/pod1/cri-c1.scope"},
      {"0::/gone (deleted)\n", 2, "/gone"},
      {"0::/\n", 2, "/"},
      {"0::/a:b\n", 2, "/a:b"},  // A colon in a path is kept.
      {"", 0, ""},
      {"garbage\n\n::\n", 0, ""},
      {"4:memory:relative/path\n", 0, ""},       // Not absolute.
      {"0::/../../escape\n", 0, ""},             // Outside this cgroup namespace.
      {"4:memory:/a/../b\n0::/ok\n", 2, "/ok"},  // The bad v1 line is dropped.
      {"4:memory:/m\n0::/u\n", 1, "/m"},         // Hybrid: the v1 controller wins.
      {"4:memory:/tr", 1, "/tr"},                // Truncated, without the newline.
      {long_line.c_str(), 0, ""},
  };
  for (const Case& c : cases) {
    CgroupPaths p = ParseProcCgroup(c.text);
    EXPECT_EQ(p.version, c.version) << c.text;
    EXPECT_EQ(p.memory_path, c.memory_path) << c.text;
  }
}

TEST(CgroupTest, ReadsAWholeV1Cgroup) {
  Tree tree(V1Files());
  CgroupFacts f = ReadCgroupFacts(ParseProcCgroup(kV1Cgroup), tree.root());
  EXPECT_EQ(f.version, 1);
  EXPECT_EQ(f.memory_limit_bytes, 268435456);
  EXPECT_EQ(f.memory_usage_bytes, 209715200);
  EXPECT_EQ(f.memory_peak_bytes, 267386880);
  EXPECT_EQ(f.memory_failcnt, 17);
  EXPECT_EQ(f.oom_kills, 1);
  EXPECT_EQ(f.memory_inactive_file_bytes, 10485760);  // total_, not the cgroup's own.
  EXPECT_EQ(f.WorkingSetBytes(), 209715200 - 10485760);
  ASSERT_TRUE(f.cpu_quota_cores);
  EXPECT_DOUBLE_EQ(*f.cpu_quota_cores, 0.5);
  EXPECT_DOUBLE_EQ(*f.cpu_period_seconds, 0.1);
  EXPECT_EQ(f.cpu_periods, 400);
  EXPECT_EQ(f.cpu_throttled_periods, 244);
  EXPECT_DOUBLE_EQ(*f.cpu_throttled_seconds, 12.5);
  EXPECT_DOUBLE_EQ(*f.memory_pressure_some_avg10, 12.5);
}

TEST(CgroupTest, ReadsV1UnderTheControllersOwnName) {
  // This machine mounts cpu alone: /proc says "cpu,cpuacct" on others, "cpu" here.
  Tree tree(V1Files("memory/kubepods/pod1/c1", "cpu/kubepods/pod1/c1"));
  CgroupFacts f = ReadCgroupFacts(ParseProcCgroup(kV1Cgroup), tree.root());
  ASSERT_TRUE(f.cpu_quota_cores);
  EXPECT_DOUBLE_EQ(*f.cpu_quota_cores, 0.5);
  EXPECT_EQ(f.cpu_throttled_periods, 244);
}

TEST(CgroupTest, V1WithoutLimitsAndAtTheRoot) {
  Tree tree({{"memory/memory.limit_in_bytes", "9223372036854771712\n"},
             {"memory/memory.usage_in_bytes", "1000\n"},
             {"cpu/cpu.cfs_quota_us", "-1\n"},
             {"cpu/cpu.cfs_period_us", "100000\n"}});
  CgroupFacts f = ReadCgroupFacts(ParseProcCgroup("4:memory:/\n1:cpu:/\n"), tree.root());
  EXPECT_EQ(f.version, 1);
  EXPECT_EQ(f.memory_limit_bytes, 0);
  EXPECT_EQ(f.memory_usage_bytes, 1000);
  EXPECT_EQ(f.cpu_quota_cores, 0.0);
  EXPECT_FALSE(f.oom_kills);
  EXPECT_FALSE(f.cpu_periods);
  EXPECT_FALSE(f.memory_pressure_some_avg10);
}

// A whole v2 cgroup, as a Kubernetes node with the unified hierarchy shows one.
TEST(CgroupTest, ReadsAWholeV2Cgroup) {
  const std::string dir = "kubepods.slice/pod1/c1";
  Tree tree({{dir + "/memory.max", "268435456\n"},
             {dir + "/memory.current", "247463936\n"},
             {dir + "/memory.peak", "268435456\n"},
             {dir + "/memory.events", "low 0\nhigh 0\nmax 31\noom 2\noom_kill 2\n"},
             {dir + "/memory.stat", "anon 1\nfile 2\ninactive_file 4096\n"},
             {dir + "/cpu.max", "5000 100000\n"},
             {dir + "/cpu.stat",
              "usage_usec 99\nnr_periods 100\nnr_throttled 61\nthrottled_usec 5900000\n"},
             {dir + "/memory.pressure", "some avg10=0.31 avg60=0.10 avg300=0.00 total=5\n"}});
  CgroupFacts f = ReadCgroupFacts(ParseProcCgroup("0::/" + dir + "\n"), tree.root());
  EXPECT_EQ(f.version, 2);
  EXPECT_EQ(f.memory_limit_bytes, 268435456);
  EXPECT_EQ(f.memory_usage_bytes, 247463936);
  EXPECT_EQ(f.memory_peak_bytes, 268435456);
  EXPECT_EQ(f.oom_kills, 2);
  EXPECT_EQ(f.WorkingSetBytes(), 247463936 - 4096);
  EXPECT_FALSE(f.memory_failcnt);  // v1 only.
  EXPECT_DOUBLE_EQ(*f.cpu_quota_cores, 0.05);
  EXPECT_EQ(f.cpu_periods, 100);
  EXPECT_EQ(f.cpu_throttled_periods, 61);
  EXPECT_DOUBLE_EQ(*f.cpu_throttled_seconds, 5.9);
  EXPECT_DOUBLE_EQ(*f.memory_pressure_some_avg10, 0.31);
}

TEST(CgroupTest, V2WithoutLimitsOrPeak) {
  Tree tree({{"a/memory.max", "max\n"}, {"a/memory.current", "10\n"}, {"a/cpu.max", "max 100000"}});
  CgroupFacts f = ReadCgroupFacts(ParseProcCgroup("0::/a\n"), tree.root());
  EXPECT_EQ(f.memory_limit_bytes, 0);
  EXPECT_EQ(f.cpu_quota_cores, 0.0);
  EXPECT_FALSE(f.memory_peak_bytes);  // Kernels before 5.19.
  EXPECT_FALSE(f.oom_kills);
}

// Each file replaced by something the kernel never writes: that fact is absent, the rest stay.
TEST(CgroupTest, BadFilesLeaveTheirFactAbsent) {
  const std::string dir = "g";
  const struct {
    const char* file;
    const char* content;
  } cases[] = {
      {"memory.max", ""},
      {"memory.max", "lots\n"},
      {"memory.max", "-7\n"},
      {"memory.max", "12 34\n"},
      {"memory.current", "99999999999999999999999\n"},
      {"memory.current", "\x01\x02\xff"},
      {"memory.events", "oom_kill\n"},
      {"memory.events", "oom_kill -3\n"},
      {"memory.events", "oom_kill 1 2\n"},
      {"cpu.max", "50000\n"},
      {"cpu.max", "50000 0\n"},
      {"cpu.max", "-5 100000\n"},
      {"cpu.stat", "nr_periods x\nnr_throttled\n"},
      {"memory.pressure", "some avg10=nan avg60=0\n"},
      {"memory.pressure", "some avg10=250.0\n"},
      {"memory.pressure", "full avg10=1.00\n"},
      {"memory.pressure", "some avg1"},  // Truncated.
  };
  for (const auto& c : cases) {
    Tree tree({{dir + "/memory.max", "1000\n"},
               {dir + "/memory.current", "500\n"},
               {dir + "/memory.events", "oom_kill 3\n"},
               {dir + "/cpu.max", "50000 100000\n"},
               {dir + "/cpu.stat", "nr_periods 10\nnr_throttled 5\nthrottled_usec 7\n"},
               {dir + "/memory.pressure", "some avg10=1.00 avg60=0 avg300=0 total=0\n"}});
    tree.Write(dir + "/" + c.file, c.content);
    CgroupFacts f = ReadCgroupFacts(ParseProcCgroup("0::/g\n"), tree.root());
    const std::string file = c.file;
    EXPECT_EQ(f.version, 2) << file << ": " << c.content;
    EXPECT_EQ(f.memory_limit_bytes.has_value(), file != "memory.max") << c.content;
    EXPECT_EQ(f.memory_usage_bytes.has_value(), file != "memory.current") << c.content;
    EXPECT_EQ(f.oom_kills.has_value(), file != "memory.events") << c.content;
    EXPECT_EQ(f.cpu_quota_cores.has_value(), file != "cpu.max") << c.content;
    EXPECT_EQ(f.cpu_periods.has_value(), file != "cpu.stat") << c.content;
    EXPECT_EQ(f.memory_pressure_some_avg10.has_value(), file != "memory.pressure") << c.content;
  }
}

TEST(CgroupTest, MissingCgroupsAndProcesses) {
  Tree tree({});
  CgroupFacts none = ReadCgroupFacts(ParseProcCgroup(kV1Cgroup), tree.root());
  EXPECT_EQ(none.version, 0);
  EXPECT_FALSE(none.memory_limit_bytes);
  EXPECT_FALSE(none.WorkingSetBytes());
  EXPECT_EQ(ReadCgroupFacts(CgroupPaths{}, tree.root()).version, 0);
  // A directory where a file should be, and a file too long to be a cgroup's.
  tree.Write("x/memory.max/inner", "1");
  tree.Write("x/memory.current", std::string(200000, '7'));
  CgroupFacts odd = ReadCgroupFacts(ParseProcCgroup("0::/x\n"), tree.root());
  EXPECT_FALSE(odd.memory_limit_bytes);
  EXPECT_FALSE(odd.memory_usage_bytes);

  EXPECT_FALSE(ReadProcessCgroups(0, tree.root()));
  EXPECT_FALSE(ReadProcessCgroups(12345, tree.root()));
  tree.Write("12345/cgroup", kV1Cgroup);
  tree.Write("777/cgroup", "1:name=systemd:/\n");
  auto paths = ReadProcessCgroups(12345, tree.root());
  ASSERT_TRUE(paths);
  EXPECT_EQ(paths->memory_path, "/kubepods/pod1/c1");
  EXPECT_FALSE(ReadProcessCgroups(777, tree.root()));  // Neither memory nor cpu.
}

// This very process on this machine: whatever the host mounts, reading never fails hard.
TEST(CgroupTest, ThisProcess) {
  auto paths = ReadProcessCgroups(getpid());
  // A host without them is covered by the fixture trees above.
  TRAINSCOPE_SKIP_UNLESS(paths.has_value(), "no memory or cpu cgroup in /proc/self/cgroup");
  CgroupFacts f = ReadCgroupFacts(*paths);
  EXPECT_EQ(f.version, paths->version);
}

TEST(CgroupTest, SingleFileParsers) {
  EXPECT_EQ(ParseCgroupLimit("max\n"), 0);
  EXPECT_EQ(ParseCgroupLimit(" 4096 "), 4096);
  EXPECT_EQ(ParseCgroupLimit("-1"), 0);
  EXPECT_EQ(ParseCgroupLimit("1152921504606846976"), 0);  // 2^60.
  EXPECT_FALSE(ParseCgroupLimit("-2"));
  EXPECT_FALSE(ParseCgroupLimit("0x10"));
  EXPECT_EQ(ParseCgroupCount("0\n"), 0);
  EXPECT_FALSE(ParseCgroupCount("-1"));
  EXPECT_EQ(ParseKeyedCount("a 1\nb 2\n", "b"), 2);
  EXPECT_FALSE(ParseKeyedCount("ab 1\n", "a"));
  auto max = ParseCpuMax("150000 100000\n");
  ASSERT_TRUE(max);
  EXPECT_DOUBLE_EQ(max->quota_cores, 1.5);
  EXPECT_DOUBLE_EQ(max->period_seconds, 0.1);
  EXPECT_EQ(ParsePsiSomeAvg10("some avg10=92.10 avg60=1 avg300=0 total=9\n"), 92.1);
  EXPECT_FALSE(ParsePsiSomeAvg10("some avg60=1\n"));
}

}  // namespace
}  // namespace trainscope

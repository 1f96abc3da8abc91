// FindTaskProcess over fake /proc trees (a task in the sidecar's namespaces, a task in a pod, a
// task that claims another process's pid, garbage), and once over the real /proc.
#include "trainscope/common/process_identity.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace trainscope {
namespace {

namespace fs = std::filesystem;

// A fake /proc tree in a temporary folder.
class FakeProc {
 public:
  FakeProc() {
    root_ = fs::temp_directory_path() / absl::StrCat("fake-proc-", getpid(), "-", ++count_);
    fs::create_directories(root_);
  }
  ~FakeProc() { fs::remove_all(root_); }
  std::string root() const { return root_.string(); }

  // A process: its pids from this namespace down to its own, start time, command, state.
  void Process(int64_t pid, const std::string& nspid, uint64_t start, const std::string& comm,
               char state = 'S') {
    const fs::path dir = root_ / std::to_string(pid);
    fs::create_directories(dir / "fd");
    fs::create_directories(dir / "net");
    Write(dir / "status", absl::StrCat("Name:\t", comm, "\nTgid:\t", pid, "\nNSpid:\t", nspid,
                                       "\nVmRSS:\t 1000 kB\n"));
    Write(dir / "comm", comm + "\n");
    Write(dir / "stat", absl::StrFormat("%d (%s) %c 1 1 1 0 -1 0 0 0 0 0 5 7 0 0 20 0 3 0 %d 1000 "
                                        "100 0\n",
                                        pid, comm, state, start));
    Write(dir / "net" / "tcp", kHeader);
    Write(dir / "net" / "tcp6", kHeader);
  }
  // A socket of `pid`'s network namespace in state `state` (0A: listening) on `port`.
  // `address`: as the kernel prints it (10.0.0.4 is 0400000A on this little-endian machine).
  void Socket(int64_t pid, int port, uint64_t inode, const char* state = "0A",
              const char* address = "00000000") {
    std::ofstream(root_ / std::to_string(pid) / "net" / "tcp", std::ios::app) << absl::StrFormat(
        "   0: %s:%04X 00000000:0000 %s 00000000:00000000 00:00000000 "
        "00000000     0        0 %d 1 0000000000000000 100 0 0 10 0\n",
        address, port, state, inode);
  }
  // `pid`'s network namespace (its /proc/PID/ns/net link).
  void NetNamespace(int64_t pid, int ns) {
    fs::create_directories(root_ / std::to_string(pid) / "ns");
    fs::create_symlink(absl::StrCat("net:[", ns, "]"), root_ / std::to_string(pid) / "ns" / "net");
  }
  // The local IPv4 address of `pid`'s network namespace, as its fib_trie lists it.
  void Address(int64_t pid, const std::string& ip) {
    Write(
        root_ / std::to_string(pid) / "net" / "fib_trie",
        absl::StrCat("Main:\n  +-- 0.0.0.0/0 3 0 5\n     |-- ", ip, "\n        /32 host LOCAL\n"));
  }
  // An fd of `pid` naming socket `inode`.
  void Fd(int64_t pid, int fd, uint64_t inode) {
    fs::create_symlink(absl::StrCat("socket:[", inode, "]"),
                       root_ / std::to_string(pid) / "fd" / std::to_string(fd));
  }
  void Write(const fs::path& path, const std::string& text) { std::ofstream(path) << text; }

 private:
  static constexpr char kHeader[] =
      "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  "
      "timeout inode\n";
  static inline int count_ = 0;
  fs::path root_;
};

TEST(ProcessIdentity, ATaskInTheSidecarsNamespacesIsItsReportedPid) {
  FakeProc proc;
  proc.Process(4242, "4242", 900, "linear_regress");
  proc.Socket(4242, 2222, 777);
  proc.Fd(4242, 5, 777);
  auto id = FindTaskProcess(4242, "", 2222, proc.root());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 4242);
  EXPECT_EQ(id->ns_pid, 4242);
  EXPECT_EQ(id->start_ticks, 900u);
  EXPECT_EQ(id->socket_inode, 777u);
  EXPECT_EQ(id->command, "linear_regress");
  EXPECT_EQ(id->Describe(), "pid 4242");
  EXPECT_TRUE(StillSameProcess(*id, proc.root()));
}

// The ps of a pod reports pid 1; pid 1 here is the machine's init, which holds no such socket.
TEST(ProcessIdentity, ATaskInAPodIsFoundThroughNSpidAndItsOwnNetworkNamespace) {
  FakeProc proc;
  proc.Process(1, "1", 1, "systemd");
  proc.Socket(1, 22, 11);
  proc.Fd(1, 3, 11);
  proc.Process(9486, "9486\t1", 5000, "linear_regress");
  proc.Socket(9486, 2222, 888);  // Its own namespace's table: the host's has no such socket.
  proc.Fd(9486, 7, 888);
  proc.Process(9490, "9490\t5", 5001, "sh");  // Another process of the pod.
  auto id = FindTaskProcess(1, "", 2222, proc.root());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 9486);
  EXPECT_EQ(id->ns_pid, 1);
  EXPECT_EQ(id->Describe(), "pid 9486 (pid 1 in its own PID namespace)");
}

TEST(ProcessIdentity, AClaimedPidThatDoesNotHoldThePortIsRefusedSayingWhy) {
  FakeProc proc;
  proc.Process(200, "200", 10, "bash");
  proc.Socket(200, 2222, 999);  // Someone in its namespace listens there, not bash.
  proc.Process(300, "300", 11, "other");
  proc.Fd(300, 4, 999);
  auto id = FindTaskProcess(200, "", 2222, proc.root());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(id.status().message(),
            "the task claims pid 200, but pid 200 (bash) does not hold its listening port 2222: "
            "not the task's process, never read as it");
}

// Every pod of a node listens on 2222, each in its own network namespace, and each is pid 1 in
// its own PID namespace: the task's is the one whose socket is on the task's address.
TEST(ProcessIdentity, PodsOnOnePortAreToldApartByTheirAddress) {
  FakeProc proc;
  for (auto [pid, ip, inode] : {std::tuple{9486, "10.0.0.2", 801}, {9500, "10.0.0.3", 802}}) {
    proc.Process(pid, absl::StrCat(pid, "\t1"), 100, "linear_regress");
    proc.Socket(pid, 2222, inode);  // On every address of its namespace.
    proc.Address(pid, ip);
    proc.Fd(pid, 5, inode);
  }
  proc.Process(9600, "9600\t1", 100, "server");
  proc.Socket(9600, 2222, 803, "0A", "0400000A");  // Bound to 10.0.0.4 alone.
  proc.Address(9600, "10.0.0.9");
  proc.Fd(9600, 5, 803);
  EXPECT_EQ(FindTaskProcess(1, "10.0.0.2", 2222, proc.root())->pid, 9486);
  EXPECT_EQ(FindTaskProcess(1, "10.0.0.3", 2222, proc.root())->pid, 9500);
  EXPECT_EQ(FindTaskProcess(1, "10.0.0.4", 2222, proc.root())->pid, 9600);
  auto none = FindTaskProcess(1, "10.0.0.5", 2222, proc.root());
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("does not hold its listening port 2222 on 10.0.0.5"),
            std::string::npos)
      << none.status();
  EXPECT_EQ(NamespaceAddresses(9486, proc.root()), std::vector<std::string>{"10.0.0.2"});
  ASSERT_EQ(ListeningSockets(9600, 2222, proc.root()).size(), 1u);
  EXPECT_EQ(ListeningSockets(9600, 2222, proc.root())[0].address, "10.0.0.4");
}

// A task watched from outside reports no pid: the holder of its socket is found in whichever
// network namespace it is, a pod's included, and another pod's listener on the same port is not
// taken for it.
TEST(ProcessIdentity, AnOutsideTasksListenerIsFoundInItsPodsNetworkNamespace) {
  FakeProc proc;
  proc.Process(1, "1", 1, "systemd");
  proc.NetNamespace(1, 100);
  proc.Process(700, "700\t1", 50, "python3");  // A pod's gRPC server (no trainscope runtime).
  proc.NetNamespace(700, 200);
  proc.Socket(700, 2222, 901);
  proc.Address(700, "10.0.0.7");
  proc.Process(701, "701\t7", 51, "sh");  // Another process of the same pod: no such fd.
  proc.NetNamespace(701, 200);
  proc.Process(800, "800\t1", 60, "python3");  // Another pod on the same port.
  proc.NetNamespace(800, 300);
  proc.Socket(800, 2222, 902);
  proc.Address(800, "10.0.0.8");
  proc.Fd(800, 3, 902);
  proc.Fd(700, 4, 901);
  auto id = FindListeningProcess("10.0.0.7", 2222, proc.root());
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, 700);
  EXPECT_EQ(id->ns_pid, 1);
  EXPECT_EQ(id->command, "python3");
  EXPECT_EQ(FindListeningProcess("10.0.0.8", 2222, proc.root())->pid, 800);
  auto none = FindListeningProcess("10.0.0.9", 2222, proc.root());
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kNotFound);
}

TEST(ProcessIdentity, APidNotSeenHereSaysWhatToGrant) {
  FakeProc proc;
  proc.Process(1, "1", 1, "systemd");
  auto id = FindTaskProcess(77, "", 2222, proc.root());
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(id.status().message().find("run it with hostPID"), std::string::npos) << id.status();
}

TEST(ProcessIdentity, OnlyAListeningSocketOnThatPortCounts) {
  FakeProc proc;
  proc.Process(50, "50", 3, "task");
  proc.Socket(50, 2222, 501, "01");  // Established, not listening.
  proc.Socket(50, 2223, 502);        // Listening, another port.
  proc.Fd(50, 3, 501);
  proc.Fd(50, 4, 502);
  EXPECT_FALSE(FindTaskProcess(50, "", 2222, proc.root()).ok());
  EXPECT_TRUE(FindTaskProcess(50, "", 2223, proc.root()).ok());
}

TEST(ProcessIdentity, AReusedPidOrAZombieIsNotTheSameProcess) {
  FakeProc proc;
  proc.Process(60, "60", 100, "task");
  proc.Socket(60, 2222, 600);
  proc.Fd(60, 3, 600);
  auto id = FindTaskProcess(60, "", 2222, proc.root());
  ASSERT_TRUE(id.ok()) << id.status();
  proc.Process(60, "60", 100, "task", 'Z');
  EXPECT_FALSE(StillSameProcess(*id, proc.root()));
  proc.Process(60, "60", 250, "task");  // The task died; its pid now names a later process.
  EXPECT_FALSE(StillSameProcess(*id, proc.root()));
  fs::remove_all(fs::path(proc.root()) / "60");
  EXPECT_FALSE(StillSameProcess(*id, proc.root()));
}

TEST(ProcessIdentity, GarbageInProcIsNoProcessNeverACrash) {
  FakeProc proc;
  proc.Process(70, "70", 1, "task");
  proc.Write(fs::path(proc.root()) / "70" / "status", "NSpid:\tseventy\n");
  proc.Write(fs::path(proc.root()) / "70" / "net" / "tcp", std::string(100000, 'x') + "\n:::\n");
  proc.Write(fs::path(proc.root()) / "70" / "stat", "garbage");
  EXPECT_TRUE(ReadNsPids(70, proc.root()).empty());
  EXPECT_TRUE(ListeningSockets(70, 2222, proc.root()).empty());
  EXPECT_TRUE(NamespaceAddresses(70, proc.root()).empty());
  EXPECT_FALSE(FindTaskProcess(70, "", 2222, proc.root()).ok());
  EXPECT_FALSE(FindTaskProcess(0, "", 2222, proc.root()).ok());
  EXPECT_FALSE(FindTaskProcess(70, "", 70000, proc.root()).ok());
  EXPECT_FALSE(FindTaskProcess(70, "", 2222, "/no/such/proc").ok());
}

TEST(ProcessIdentity, TheRealProcFindsThisProcessByItsListeningSocket) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  auto id = FindTaskProcess(getpid(), "127.0.0.1", port);
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(id->pid, getpid());
  EXPECT_TRUE(StillSameProcess(*id));
  close(fd);
  EXPECT_FALSE(FindTaskProcess(getpid(), "127.0.0.1", port).ok());
}

}  // namespace
}  // namespace trainscope

// Capture of a live process's threads: /proc readers, the libdwfl unwinder (attach, walk and
// detach one thread at a time, keeping only program counters while a thread is held) and the
// symbolizer, which runs once every thread has been let go. See capture.h.

#include "trainscope/forensics/capture.h"

#include <cxxabi.h>
#include <dirent.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <sys/ptrace.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"

namespace trainscope::forensics {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kMaxProcFile = 16 * 1024;  // Bytes read of any /proc file.
constexpr int kMaxThreadsLimit = 1 << 16;
constexpr int kMaxFramesLimit = 4096;

std::string ErrnoText(int err) {
  char buf[128];
  return strerror_r(err, buf, sizeof(buf));  // GNU strerror_r: returns the text.
}

// libdwfl's last error, in words (and cleared).
std::string DwflError() {
  const char* message = dwfl_errmsg(-1);
  return message != nullptr ? message : "unknown libdwfl error";
}

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The contents of a small /proc file (at most kMaxProcFile bytes); nullopt when it cannot be
// read, with errno set.
std::optional<std::string> ReadProcFile(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string out;
  char buf[4096];
  while (out.size() < kMaxProcFile) {
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      close(fd);
      errno = err;
      return std::nullopt;
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return out;
}

// A one-line /proc value (comm, wchan): trailing whitespace cut, control characters replaced.
std::string ProcLine(const std::string& path) {
  std::optional<std::string> text = ReadProcFile(path);
  if (!text) return "";
  std::string line(absl::StripTrailingAsciiWhitespace(*text));
  for (char& c : line) {
    if (static_cast<unsigned char>(c) < 0x20) c = '?';
  }
  return line;
}

constexpr uint64_t kKernelThreadFlag = 0x00200000;  // PF_KTHREAD in /proc/.../stat flags.

// What a /proc/.../stat line ("pid (comm) S ppid pgrp session tty tpgid flags ...") says.
struct Stat {
  char state = '?';
  uint64_t flags = 0;
};

Stat ReadStat(const std::string& path) {
  Stat stat;
  std::optional<std::string> line = ReadProcFile(path);
  const size_t close_paren = line ? line->rfind(')') : std::string::npos;
  if (close_paren == std::string::npos || close_paren + 2 >= line->size()) return stat;
  const std::vector<absl::string_view> fields =
      absl::StrSplit(absl::string_view(*line).substr(close_paren + 2), ' ');
  stat.state = fields[0].empty() ? '?' : fields[0][0];
  if (fields.size() > 6 && !absl::SimpleAtoi(fields[6], &stat.flags)) stat.flags = 0;
  return stat;
}

// A numeric field ("Tgid", "TracerPid") of /proc/PID/status.
std::optional<int64_t> StatusField(absl::string_view status, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(status, '\n')) {
    if (!absl::ConsumePrefix(&line, key) || !absl::ConsumePrefix(&line, ":")) continue;
    int64_t value = 0;
    if (absl::SimpleAtoi(absl::StripAsciiWhitespace(line), &value)) return value;
    return std::nullopt;
  }
  return std::nullopt;
}

struct SyscallName {
  long number;
  const char* name;
};

// Common blocking system calls, by this architecture's numbers.
constexpr SyscallName kSyscalls[] = {
    {SYS_read, "read"},
    {SYS_write, "write"},
    {SYS_readv, "readv"},
    {SYS_writev, "writev"},
    {SYS_pread64, "pread64"},
    {SYS_pwrite64, "pwrite64"},
    {SYS_futex, "futex"},
    {SYS_ppoll, "ppoll"},
    {SYS_pselect6, "pselect6"},
    {SYS_epoll_pwait, "epoll_pwait"},
    {SYS_nanosleep, "nanosleep"},
    {SYS_clock_nanosleep, "clock_nanosleep"},
    {SYS_accept4, "accept4"},
    {SYS_connect, "connect"},
    {SYS_recvfrom, "recvfrom"},
    {SYS_recvmsg, "recvmsg"},
    {SYS_sendto, "sendto"},
    {SYS_sendmsg, "sendmsg"},
    {SYS_wait4, "wait4"},
    {SYS_waitid, "waitid"},
    {SYS_ioctl, "ioctl"},
    {SYS_fsync, "fsync"},
    {SYS_fdatasync, "fdatasync"},
    {SYS_openat, "openat"},
    {SYS_close, "close"},
    {SYS_flock, "flock"},
    {SYS_fcntl, "fcntl"},
    {SYS_sched_yield, "sched_yield"},
    {SYS_rt_sigsuspend, "rt_sigsuspend"},
    {SYS_rt_sigtimedwait, "rt_sigtimedwait"},
    {SYS_msync, "msync"},
    {SYS_munmap, "munmap"},
#ifdef SYS_poll
    {SYS_poll, "poll"},
#endif
#ifdef SYS_select
    {SYS_select, "select"},
#endif
#ifdef SYS_epoll_wait
    {SYS_epoll_wait, "epoll_wait"},
#endif
#ifdef SYS_pause
    {SYS_pause, "pause"},
#endif
#ifdef SYS_accept
    {SYS_accept, "accept"},
#endif
#ifdef SYS_epoll_pwait2
    {SYS_epoll_pwait2, "epoll_pwait2"},
#endif
};

// /proc/.../syscall ("202 0x... ...", "running", "-1 ..."): the call's name when known.
std::string SyscallText(const std::string& path) {
  std::optional<std::string> text = ReadProcFile(path);
  if (!text) return "";
  absl::string_view first = absl::StripAsciiWhitespace(*text);
  first = first.substr(0, first.find(' '));
  long number = 0;
  if (!absl::SimpleAtoi(first, &number)) return std::string(first.substr(0, 32));
  for (const SyscallName& entry : kSyscalls) {
    if (entry.number == number) return entry.name;
  }
  return std::string(first);
}

ThreadSnapshot ReadThread(int64_t pid, int64_t tid) {
  const std::string dir = absl::StrCat("/proc/", pid, "/task/", tid, "/");
  ThreadSnapshot thread;
  thread.tid = tid;
  thread.name = ProcLine(dir + "comm");
  thread.state = ReadStat(dir + "stat").state;
  thread.wchan = ProcLine(dir + "wchan");
  if (thread.wchan == "0") thread.wchan.clear();
  thread.syscall = SyscallText(dir + "syscall");
  return thread;
}

// Thread ids of `pid`, main thread first, then ascending.
std::vector<int64_t> ListTids(int64_t pid) {
  std::vector<int64_t> tids;
  DIR* dir = opendir(absl::StrCat("/proc/", pid, "/task").c_str());
  if (dir == nullptr) return tids;
  while (const dirent* entry = readdir(dir)) {
    int64_t tid = 0;
    if (absl::SimpleAtoi(entry->d_name, &tid) && tid > 0) tids.push_back(tid);
  }
  closedir(dir);
  std::sort(tids.begin(), tids.end(),
            [pid](int64_t a, int64_t b) { return (a == pid) != (b == pid) ? a == pid : a < b; });
  return tids;
}

// What /proc says about the process as a whole.
struct ProcessInfo {
  int64_t pid = 0;  // The thread group id (a thread id given to Capture is mapped to it).
  char state = '?';
  std::string command;
  int64_t tracer = 0;  // TracerPid: someone else (a debugger, strace) already traces it.
  bool kernel_thread = false;
};

absl::StatusOr<ProcessInfo> ReadProcessInfo(int64_t pid) {
  std::optional<std::string> status = ReadProcFile(absl::StrCat("/proc/", pid, "/status"));
  if (!status) {
    if (errno == ENOENT || errno == ESRCH) {
      return absl::NotFoundError(absl::StrCat("no process with pid ", pid));
    }
    return absl::UnavailableError(
        absl::StrCat("cannot read /proc/", pid, "/status: ", ErrnoText(errno)));
  }
  ProcessInfo info;
  info.pid = StatusField(*status, "Tgid").value_or(pid);
  info.tracer = StatusField(*status, "TracerPid").value_or(0);
  const Stat stat = ReadStat(absl::StrCat("/proc/", info.pid, "/stat"));
  info.state = stat.state;
  info.kernel_thread = (stat.flags & kKernelThreadFlag) != 0;
  info.command = ProcLine(absl::StrCat("/proc/", info.pid, "/comm"));
  return info;
}

// What is missing and what to grant when ptrace is refused.
std::string PermissionMessage(int64_t pid, int err) {
  std::string message = absl::StrFormat(
      "cannot attach to pid %d with ptrace (%s): run the sidecar as root, or with "
      "CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and CAP_KILL (as its systemd unit does); on Kubernetes, "
      "shareProcessNamespace: true or a DaemonSet with "
      "hostPID and securityContext.capabilities.add [SYS_PTRACE]",
      pid, ErrnoText(err));
  std::optional<std::string> yama = ReadProcFile("/proc/sys/kernel/yama/ptrace_scope");
  int scope = 0;
  if (yama && absl::SimpleAtoi(absl::StripAsciiWhitespace(*yama), &scope) && scope > 0) {
    absl::StrAppendFormat(&message, "; /proc/sys/kernel/yama/ptrace_scope is %d (%s)", scope,
                          scope == 1   ? "only a parent may attach without CAP_SYS_PTRACE: "
                                         "grant CAP_SYS_PTRACE or set it to 0"
                          : scope == 2 ? "only with CAP_SYS_PTRACE"
                                       : "ptrace is disabled until reboot");
  }
  return message;
}

struct DwflCloser {
  void operator()(Dwfl* dwfl) const { dwfl_end(dwfl); }
};
using DwflPtr = std::unique_ptr<Dwfl, DwflCloser>;

const Dwfl_Callbacks kDwflCallbacks = {
    .find_elf = dwfl_linux_proc_find_elf,
    .find_debuginfo = dwfl_standard_find_debuginfo,
    .section_address = nullptr,
    .debuginfo_path = nullptr,
};

// The errno behind libdwfl's last error message, when it is one that matters here.
int ErrnoOfMessage(const std::string& message) {
  for (int err : {EPERM, EACCES, ESRCH}) {
    if (message == ErrnoText(err)) return err;
  }
  return 0;
}

// A Dwfl that knows the process's modules and is ready to attach to its threads (it attaches
// to none yet). On failure: null, and `*err` (an errno, or 0) and `*error` say why.
DwflPtr OpenDwfl(int64_t pid, int* err, std::string* error) {
  DwflPtr dwfl(dwfl_begin(&kDwflCallbacks));
  if (dwfl == nullptr) {
    *error = DwflError();
    return nullptr;
  }
  const auto tgid = static_cast<pid_t>(pid);
  int rc = dwfl_linux_proc_report(dwfl.get(), tgid);
  if (rc == 0 && dwfl_report_end(dwfl.get(), nullptr, nullptr) != 0) rc = -1;
  // The threads are seized by Hold below, not attached by libdwfl (assume_ptrace_stopped).
  if (rc == 0) rc = dwfl_linux_proc_attach(dwfl.get(), tgid, true);
  if (rc == 0) return dwfl;
  *err = rc > 0 ? rc : 0;
  *error = rc > 0 ? ErrnoText(rc) : DwflError();
  if (*err == 0) *err = ErrnoOfMessage(*error);
  return nullptr;
}

// Loads every module's ELF and .eh_frame before any thread is stopped, so that no thread is
// held while files are opened. The vDSO is left for libdwfl to read while attached.
void PrewarmModules(Dwfl* dwfl) {
  auto load = [](Dwfl_Module* mod, void**, const char* name, Dwarf_Addr, void*) -> int {
    if (name != nullptr && absl::StartsWith(name, "[vdso")) return DWARF_CB_OK;
    Dwarf_Addr bias = 0;
    dwfl_module_eh_cfi(mod, &bias);
    return DWARF_CB_OK;
  };
  dwfl_getmodules(dwfl, load, nullptr, 0);
}

// A stack as walked while its thread is held: program counters only.
struct RawFrame {
  Dwarf_Addr pc = 0;
  bool activation = false;  // True for the innermost frame and signal frames: pc is exact.
};
struct Walk {
  std::vector<RawFrame> frames;
  size_t max_frames = 0;
  bool cut = false;
  std::string pc_error;
};

int OnFrame(Dwfl_Frame* frame, void* arg) {
  auto* walk = static_cast<Walk*>(arg);
  if (walk->frames.size() >= walk->max_frames) {
    walk->cut = true;
    return DWARF_CB_ABORT;
  }
  RawFrame raw;
  if (!dwfl_frame_pc(frame, &raw.pc, &raw.activation)) {
    walk->pc_error = DwflError();
    return DWARF_CB_ABORT;
  }
  walk->frames.push_back(raw);
  return DWARF_CB_OK;
}

// Holds thread `tid` for a walk: PTRACE_SEIZE, then PTRACE_INTERRUPT and wait for its stop.
// Unlike PTRACE_ATTACH (libdwfl's own), no SIGSTOP is sent: if the tracer dies while holding
// it (killed, or past the helper's deadline), the kernel detaches the thread and it runs on; a
// thread already stopped (SIGSTOP, state T) stays stopped after Release. 0 or the errno.
int Hold(pid_t tid) {
  if (ptrace(PTRACE_SEIZE, tid, nullptr, nullptr) != 0) return errno;
  if (ptrace(PTRACE_INTERRUPT, tid, nullptr, nullptr) != 0) {
    const int err = errno;
    ptrace(PTRACE_DETACH, tid, nullptr, nullptr);
    return err;
  }
  while (true) {
    int status = 0;
    const pid_t r = waitpid(tid, &status, __WALL);
    if (r == tid && WIFSTOPPED(status)) return 0;
    if (r == tid) return ESRCH;  // Exited (or killed) before it stopped.
    if (errno != EINTR) return errno;
  }
}

// Lets a held thread go (a thread that was group-stopped before stays stopped).
void Release(pid_t tid) { ptrace(PTRACE_DETACH, tid, nullptr, nullptr); }

// Why a walk ended early, in words (empty when the stack is whole).
std::string WalkError(int rc, const Walk& walk, const std::string& dwfl_error) {
  if (walk.cut) return absl::StrFormat("cut at max_frames (%d)", walk.max_frames);
  if (!walk.pc_error.empty()) return "unwinding stopped: " + walk.pc_error;
  if (rc == 0) return "";
  if (ErrnoOfMessage(dwfl_error) == ESRCH) return "thread exited during the capture";
  if (walk.frames.empty()) return "cannot unwind: " + dwfl_error;
  return "unwinding stopped: " + dwfl_error;
}

// Sets file:line from the DW_AT_call_file/DW_AT_call_line of an inlined instance: the line
// that called the inlined function.
bool SetCallSite(Dwarf_Die* cu, Dwarf_Die* inlined, Frame* frame) {
  Dwarf_Attribute attr;
  Dwarf_Word file_index = 0;
  Dwarf_Word line = 0;
  Dwarf_Files* files = nullptr;
  size_t file_count = 0;
  if (dwarf_formudata(dwarf_attr(inlined, DW_AT_call_file, &attr), &file_index) != 0 ||
      dwarf_formudata(dwarf_attr(inlined, DW_AT_call_line, &attr), &line) != 0 ||
      dwarf_getsrcfiles(cu, &files, &file_count) != 0 || file_index >= file_count) {
    return false;
  }
  const char* name = dwarf_filesrc(files, file_index, nullptr, nullptr);
  if (name == nullptr) return false;
  frame->file = name;
  frame->line = static_cast<int>(std::min<Dwarf_Word>(line, INT_MAX));
  return true;
}

// Sets file:line from pc's own line-table row; with `function_start` (non-zero), only when that
// row starts inside the function (at or after its start): else it is another function's row.
void SetOwnLine(Dwfl_Module* mod, Dwarf_Addr pc, Frame* frame, Dwarf_Addr function_start = 0) {
  Dwfl_Line* row = dwfl_module_getsrc(mod, pc);
  Dwarf_Addr addr = 0;
  int line = 0;
  const char* file =
      row == nullptr ? nullptr : dwfl_lineinfo(row, &addr, &line, nullptr, nullptr, nullptr);
  if (file == nullptr || line <= 0 || addr < function_start) return;
  frame->file = file;
  frame->line = line;
}

// Sets file:line to the line in the function that owns `pc`: when other functions are inlined
// at pc, the line of the outermost inlined call (what was written in that function), else pc's
// own line. When DWARF places pc in no function (libdw 0.188 finds none in clang's DWARF 5),
// pc's own row only if it lies within the function the symbol table names (`function_start`):
// libdw would otherwise answer with the nearest row of some other function (as for _start).
void SetLine(Dwfl_Module* mod, Dwarf_Addr pc, Frame* frame, Dwarf_Addr function_start) {
  Dwarf_Addr bias = 0;
  Dwarf_Die* cu = dwfl_module_addrdie(mod, pc, &bias);
  Dwarf_Die* scopes = nullptr;
  const int n = cu == nullptr ? 0 : dwarf_getscopes(cu, pc - bias, &scopes);
  int tag = 0;
  int i = 0;
  for (; i < n; ++i) {
    tag = dwarf_tag(&scopes[i]);
    if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) break;
  }
  Dwarf_Die* chain = nullptr;
  // dwarf_getscopes gives only the innermost inlined instance; dwarf_getscopes_die its
  // concrete callers, out to the subprogram.
  const int chain_size =
      i < n && tag == DW_TAG_inlined_subroutine ? dwarf_getscopes_die(&scopes[i], &chain) : 0;
  Dwarf_Die* outermost = nullptr;
  for (int j = 0; j < chain_size && dwarf_tag(&chain[j]) != DW_TAG_subprogram; ++j) {
    if (dwarf_tag(&chain[j]) == DW_TAG_inlined_subroutine) outermost = &chain[j];
  }
  if (i < n && (outermost == nullptr || !SetCallSite(cu, outermost, frame))) {
    SetOwnLine(mod, pc, frame);
  } else if (i >= n && function_start != 0) {
    SetOwnLine(mod, pc, frame, function_start);
  }
  free(chain);
  free(scopes);
}

std::string Demangle(const char* symbol) {
  if (!absl::StartsWith(symbol, "_Z")) return symbol;
  int status = 0;
  std::unique_ptr<char, decltype(&free)> name(
      abi::__cxa_demangle(symbol, nullptr, nullptr, &status), &free);
  return status == 0 && name != nullptr ? std::string(name.get()) : std::string(symbol);
}

// The functions of each module of one capture, sorted by address, read once per module: libdw's
// dwfl_module_addrinfo scans every symbol of the module for each address, which for a library
// of TensorFlow's size (hundreds of thousands of symbols) took 27 s for one capture of 96
// threads. Not thread-safe: one per capture.
class SymbolIndex {
 public:
  // The function containing `pc` in `mod` and its start; nullptr when the table has none (the
  // caller then asks libdw, which also knows symbols without a size).
  const char* Find(Dwfl_Module* mod, Dwarf_Addr pc, Dwarf_Addr* start) {
    std::vector<Symbol>& table = Table(mod);
    auto it = std::upper_bound(table.begin(), table.end(), pc,
                               [](Dwarf_Addr a, const Symbol& s) { return a < s.start; });
    // Among the symbols starting at or below pc, the nearest one whose range holds it.
    for (int looked = 0; it != table.begin() && looked < 8; ++looked) {
      --it;
      if (pc < it->start + it->size) {
        *start = it->start;
        return it->name;
      }
    }
    return nullptr;
  }

 private:
  struct Symbol {
    Dwarf_Addr start = 0;
    Dwarf_Addr size = 0;
    const char* name = nullptr;  // Owned by the Dwfl's ELF data.
    int rank = 0;                // Lower: the name shown when several start at one address.
  };
  std::vector<Symbol>& Table(Dwfl_Module* mod) {
    auto [it, added] = tables_.try_emplace(mod);
    if (!added) return it->second;
    const int n = dwfl_module_getsymtab(mod);
    for (int i = 1; i < n; ++i) {
      GElf_Sym sym;
      GElf_Addr addr = 0;
      const char* name = dwfl_module_getsym_info(mod, i, &sym, &addr, nullptr, nullptr, nullptr);
      const int type = GELF_ST_TYPE(sym.st_info);
      if (name == nullptr || *name == '\0' || sym.st_size == 0 ||
          (type != STT_FUNC && type != STT_GNU_IFUNC)) {
        continue;
      }
      it->second.push_back({addr, sym.st_size, name, Rank(sym, name)});
    }
    // One name per address, as libdw would choose it: a global before a weak before a local
    // alias (__clone3, not __GI___clone3), a default version before another (@@GLIBC_2.34).
    std::vector<Symbol>& table = it->second;
    std::stable_sort(table.begin(), table.end(), [](const Symbol& a, const Symbol& b) {
      return a.start != b.start ? a.start < b.start : a.rank < b.rank;
    });
    table.erase(std::unique(table.begin(), table.end(),
                            [](const Symbol& a, const Symbol& b) { return a.start == b.start; }),
                table.end());
    return table;
  }
  static int Rank(const GElf_Sym& sym, const char* name) {
    const int bind = GELF_ST_BIND(sym.st_info);
    const int by_bind = bind == STB_GLOBAL ? 0 : bind == STB_WEAK ? 1 : 2;
    const char* at = std::strchr(name, '@');
    const int by_version = at == nullptr ? 1 : at[1] == '@' ? 0 : 2;
    return by_bind * 4 + by_version;
  }
  std::map<Dwfl_Module*, std::vector<Symbol>> tables_;
};

Frame Symbolize(Dwfl* dwfl, SymbolIndex& index, const RawFrame& raw) {
  Frame frame;
  frame.pc = raw.activation || raw.pc == 0 ? raw.pc : raw.pc - 1;
  Dwfl_Module* mod = dwfl_addrmodule(dwfl, frame.pc);
  if (mod == nullptr) return frame;
  const char* name =
      dwfl_module_info(mod, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (name != nullptr) {
    absl::string_view path = name;
    frame.module = std::string(path.substr(path.rfind('/') + 1));  // npos + 1 == 0.
  }
  Dwarf_Addr start = 0;
  const char* symbol = index.Find(mod, frame.pc, &start);
  if (symbol == nullptr) {
    GElf_Off offset = 0;
    GElf_Sym sym;
    symbol = dwfl_module_addrinfo(mod, frame.pc, &offset, &sym, nullptr, nullptr, nullptr);
    start = frame.pc - offset;
  }
  if (symbol != nullptr) frame.function = Demangle(symbol);
  SetLine(mod, frame.pc, &frame, symbol != nullptr ? start : 0);
  return frame;
}

// Why a thread is not attached at all, or empty when it may be.
std::string SkipReason(const ThreadSnapshot& thread, size_t index, size_t count,
                       size_t max_threads) {
  if (index >= max_threads) {
    return absl::StrFormat("not unwound: %d threads, over max_threads (%d)", count, max_threads);
  }
  if (thread.state == 'D') {
    return "not unwound: in uninterruptible sleep (D), ptrace would wait until it wakes; see "
           "wchan";
  }
  if (thread.state == 'Z' || thread.state == 'X') return "not unwound: the thread has exited";
  return "";
}

// Walks every thread's stack (one thread held at a time), then symbolizes. Sets stacks,
// stacks_error, the pause figures and each thread's frames and stack_error.
void UnwindAll(const CaptureOptions& options, ProcessSnapshot* snapshot) {
  int err = 0;
  std::string error;
  DwflPtr dwfl = OpenDwfl(snapshot->pid, &err, &error);
  if (dwfl == nullptr) {
    snapshot->stacks_error = err == EPERM || err == EACCES
                                 ? PermissionMessage(snapshot->pid, err)
                                 : "cannot read the process's modules: " + error;
    return;
  }
  PrewarmModules(dwfl.get());
  const auto max_threads =
      static_cast<size_t>(std::clamp(options.max_threads, 0, kMaxThreadsLimit));
  const auto max_frames = static_cast<size_t>(std::clamp(options.max_frames, 1, kMaxFramesLimit));
  std::vector<ThreadSnapshot>& threads = snapshot->threads;
  std::vector<std::vector<RawFrame>> stacks(threads.size());
  std::optional<Clock::time_point> first_start;
  Clock::time_point last_end;
  bool any_walked = false;
  for (size_t i = 0; i < threads.size(); ++i) {
    threads[i].stack_error = SkipReason(threads[i], i, threads.size(), max_threads);
    if (!threads[i].stack_error.empty()) continue;
    Walk walk;
    walk.max_frames = max_frames;
    walk.frames.reserve(max_frames);  // No allocation while the thread is held.
    const auto tid = static_cast<pid_t>(threads[i].tid);
    const Clock::time_point start = Clock::now();
    const int hold_errno = Hold(tid);
    int rc = hold_errno == 0 ? dwfl_getthread_frames(dwfl.get(), tid, OnFrame, &walk) : -1;
    if (hold_errno == 0 && options.hold_ms_for_tests > 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(options.hold_ms_for_tests));
    }
    if (hold_errno == 0) Release(tid);
    last_end = Clock::now();
    if (!first_start) first_start = start;
    snapshot->pause_ms_max = std::max(snapshot->pause_ms_max, Ms(last_end - start));
    const std::string dwfl_error = hold_errno != 0 ? ErrnoText(hold_errno)
                                   : rc == -1      ? DwflError()
                                                   : "";
    const int walk_errno = hold_errno != 0 ? hold_errno : ErrnoOfMessage(dwfl_error);
    if (walk.frames.empty() && !any_walked && (walk_errno == EPERM || walk_errno == EACCES)) {
      snapshot->stacks_error = PermissionMessage(snapshot->pid, walk_errno);
      for (ThreadSnapshot& thread : threads) thread.stack_error.clear();
      return;  // One thread refused: all would be. Each walk has detached its thread.
    }
    any_walked = any_walked || !walk.frames.empty();
    threads[i].stack_error = WalkError(rc, walk, dwfl_error);
    stacks[i] = std::move(walk.frames);
  }
  if (first_start) snapshot->pause_ms_total = Ms(last_end - *first_start);
  snapshot->stacks = true;
  SymbolIndex index;
  for (size_t i = 0; i < threads.size(); ++i) {
    for (const RawFrame& raw : stacks[i]) {
      threads[i].frames.push_back(Symbolize(dwfl.get(), index, raw));
    }
  }
}

void AppendThread(const ThreadSnapshot& thread, std::string* out) {
  std::vector<std::string> what = {std::string(1, thread.state)};
  if (!thread.wchan.empty()) what.push_back(thread.wchan);
  if (!thread.syscall.empty()) what.push_back(thread.syscall);
  absl::StrAppendFormat(out, "\nThread %d \"%s\" (%s)\n", thread.tid, thread.name,
                        absl::StrJoin(what, ", "));
  for (size_t i = 0; i < thread.frames.size(); ++i) {
    const Frame& frame = thread.frames[i];
    absl::StrAppendFormat(out, "  #%-2d 0x%016x %s (%s)", i, frame.pc,
                          frame.function.empty() ? "??" : frame.function,
                          frame.module.empty() ? "??" : frame.module);
    if (!frame.file.empty()) absl::StrAppendFormat(out, " at %s:%d", frame.file, frame.line);
    out->push_back('\n');
  }
  if (!thread.stack_error.empty()) absl::StrAppendFormat(out, "  (%s)\n", thread.stack_error);
}

}  // namespace

absl::StatusOr<ProcessSnapshot> Capture(int64_t pid, const CaptureOptions& options) {
  if (pid <= 0 || pid > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat("not a process id: ", pid));
  }
  absl::StatusOr<ProcessInfo> info = ReadProcessInfo(pid);
  if (!info.ok()) return info.status();
  ProcessSnapshot snapshot;
  snapshot.pid = info->pid;
  snapshot.command = info->command;
  snapshot.state = info->state;
  snapshot.taken_unix =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  bool any_alive = false;
  for (int64_t tid : ListTids(info->pid)) {
    ThreadSnapshot thread = ReadThread(info->pid, tid);
    if (thread.state == '?') continue;  // It exited while we listed.
    any_alive = any_alive || (thread.state != 'Z' && thread.state != 'X');
    snapshot.threads.push_back(std::move(thread));
  }
  // A zombie: it exited and its parent has not reaped it. Judged by its threads, not by the
  // process's own state: a process whose main thread alone exited also shows Z, and a zombie
  // may still list its last thread for a moment.
  if (!any_alive) {
    return absl::NotFoundError(absl::StrCat("pid ", pid, " has exited (zombie, not yet reaped)"));
  }
  if (!options.stacks) {
    snapshot.stacks_error = "stacks not asked for (CaptureOptions.stacks=false): /proc data only";
  } else if (info->kernel_thread) {
    snapshot.stacks_error = absl::StrCat("pid ", info->pid, " is a kernel thread: no user stack");
    for (ThreadSnapshot& thread : snapshot.threads) thread.syscall.clear();  // Not meaningful.
  } else if (info->pid == getpid()) {
    snapshot.stacks_error = "a process cannot ptrace its own threads: capture it from another";
  } else if (info->tracer != 0) {
    snapshot.stacks_error = absl::StrFormat(
        "pid %d is already traced by pid %d (a debugger or strace): detach it first", info->pid,
        info->tracer);
  } else {
    UnwindAll(options, &snapshot);
  }
  return snapshot;
}

std::string FormatSnapshot(const ProcessSnapshot& snapshot) {
  std::string out = absl::StrFormat("Process %d \"%s\" (%c), %d threads", snapshot.pid,
                                    snapshot.command, snapshot.state, snapshot.threads.size());
  if (snapshot.stacks) {
    absl::StrAppendFormat(&out, "; threads held %.3f ms at most each, %.3f ms in all\n",
                          snapshot.pause_ms_max, snapshot.pause_ms_total);
  } else {
    absl::StrAppendFormat(&out, "; no stacks: %s\n", snapshot.stacks_error);
  }
  for (const ThreadSnapshot& thread : snapshot.threads) AppendThread(thread, &out);
  return out;
}

}  // namespace trainscope::forensics

#pragma once
// Snapshots every thread of a live process on this machine: what /proc says about each thread
// (name, state, wait channel, system call) and, with ptrace permission, its call stack unwound
// by elfutils' libdwfl, symbolized and with file:line where DWARF line info exists. Used by the
// sidecar to explain a stuck task. Output reads like eu-stack or py-spy dump.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace trainscope::forensics {

// One frame of a call stack.
struct Frame {
  uint64_t pc = 0;       // The innermost frame's program counter; return address - 1 otherwise.
  std::string function;  // Demangled symbol, e.g. "trainscope::ParameterClient::Pull(...)";
                         // empty when unknown.
  std::string module;    // Basename of the ELF file, e.g. "libc.so.6".
  std::string file;      // Source file when DWARF line info exists, else empty.
  int line = 0;          // A line of `function` itself: for code inlined into it, the call's.
};

// One thread: /proc data always, frames when its stack could be read.
struct ThreadSnapshot {
  int64_t tid = 0;
  std::string name;           // /proc/PID/task/TID/comm.
  char state = '?';           // R S D T t Z ..., read before any thread was attached.
  std::string wchan;          // Kernel function the thread sleeps in; empty when none/unknown.
  std::string syscall;        // "futex", "epoll_wait", ..., "running", or the number.
  std::vector<Frame> frames;  // Innermost first; empty when the stack could not be read.
  std::string stack_error;    // Why frames is empty or cut short, in words; empty when whole.
};

// Every thread of one process at one moment.
struct ProcessSnapshot {
  int64_t pid = 0;
  std::string command;        // /proc/PID/comm.
  char state = '?';           // Process state before the capture.
  double taken_unix = 0;      // When the capture started (seconds since the epoch).
  double pause_ms_max = 0;    // Longest time any one thread was held stopped by the capture
                              // (its attach, unwind and detach).
  double pause_ms_total = 0;  // Wall time from the first attach to the last detach.
  bool stacks = false;        // False: /proc data only (not asked, or no permission).
  std::string stacks_error;   // When stacks is false: why, and what to grant, in words.
  std::vector<ThreadSnapshot> threads;  // Main thread first, then by tid.
};

// What a capture does. Values out of range are clamped.
struct CaptureOptions {
  bool stacks = true;         // False: /proc only, no ptrace.
  int max_threads = 512;      // Threads beyond are listed without a stack (stack_error says so).
  int max_frames = 64;        // Per thread; a longer stack is cut (stack_error says so).
  int hold_ms_for_tests = 0;  // Tests only: hold each thread this much longer (kill tests).
};

// Snapshot of every thread of `pid` (a thread id is taken as its process). Reads /proc for all
// threads first, then holds one thread at a time (PTRACE_SEIZE and PTRACE_INTERRUPT, never
// SIGSTOP: if the caller dies mid-capture, the kernel detaches and the thread runs on), unwinds
// it and lets it go, so each thread is held only for its own walk; a process that was stopped
// (SIGSTOP, state T) stays stopped. Symbols and lines are looked up after the thread is let go.
// Threads in uninterruptible sleep (D) are not attached: ptrace would wait until they wake.
//
// Errors: InvalidArgument for pid <= 0; NotFound (with the pid) when there is no such process
// or it is a zombie. Without ptrace permission the result is OK with stacks=false and
// stacks_error saying what is missing and what to grant (CAP_SYS_PTRACE, Kubernetes settings,
// /proc/sys/kernel/yama/ptrace_scope). Nothing stays attached when Capture returns.
//
// Thread-safety: callers serialize captures of one pid. ptrace ties a tracee to the calling
// thread, so the whole capture runs on it, and it waits for its tracee with waitpid(tid): no
// other thread of the caller may reap children with waitpid(-1)/wait() during a capture, or it
// may steal the tracee's stop and hang the capture.
absl::StatusOr<ProcessSnapshot> Capture(int64_t pid, const CaptureOptions& options = {});

// Text like eu-stack or py-spy dump: a line for the process, then one block per thread,
// innermost frame first:
//   Thread 1234 "worker-train" (S, futex_wait_queue, futex)
//     #0  0x00007f... __futex_abstimed_wait_common (libc.so.6)
//     #1  0x000055... trainscope::ParameterClient::Pull(...) (linear_regression) at f.cc:123
// Thread-safe (no state).
std::string FormatSnapshot(const ProcessSnapshot& snapshot);

}  // namespace trainscope::forensics

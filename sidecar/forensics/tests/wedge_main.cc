// forensics_wedge: a process for the forensics tests and bench to capture.
//   forensics_wedge deadlock  threads "lock-a" and "lock-b" deadlock on two mutexes
//   forensics_wedge spin      30 threads "sleeper" sleep in SleepingThread
// Prints "ready" once the state is certain; the main thread then waits in WaitForever.

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

namespace {

std::mutex mutex_a;
std::mutex mutex_b;
std::atomic<int> first_locks_taken{0};

// Waits until both threads hold their first mutex, so that the second lock must deadlock.
void WaitForBothFirstLocks() {
  first_locks_taken.fetch_add(1);
  while (first_locks_taken.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

__attribute__((noinline)) void TakeAThenB() {
  std::lock_guard<std::mutex> a(mutex_a);
  WaitForBothFirstLocks();
  std::lock_guard<std::mutex> b(mutex_b);
  asm volatile("" ::: "memory");  // Keeps the frame: no tail call, nothing folded.
}

__attribute__((noinline)) void TakeBThenA() {
  std::lock_guard<std::mutex> b(mutex_b);
  WaitForBothFirstLocks();
  std::lock_guard<std::mutex> a(mutex_a);
  asm volatile("" ::: "memory");
}

__attribute__((noinline)) void SleepingThread() {
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

// Says "ready" and never returns.
__attribute__((noinline, noreturn)) void WaitForever() {
  std::fputs("ready\n", stdout);
  std::fflush(stdout);
  for (;;) pause();
}

std::thread Named(const char* name, void (*body)()) {
  return std::thread([name, body] {
    pthread_setname_np(pthread_self(), name);
    body();
  });
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::thread> threads;
  if (argc == 2 && std::strcmp(argv[1], "deadlock") == 0) {
    threads.push_back(Named("lock-a", TakeAThenB));
    threads.push_back(Named("lock-b", TakeBThenA));
    while (first_locks_taken.load() < 2) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // Both now block in lock().
  } else if (argc == 2 && std::strcmp(argv[1], "spin") == 0) {
    for (int i = 0; i < 30; ++i) threads.push_back(Named("sleeper", SleepingThread));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } else {
    std::fprintf(stderr, "usage: %s deadlock|spin\n", argv[0]);
    return 2;
  }
  WaitForever();
}

#pragma once
// A gate that a gRPC callback service's handlers pass through, so that its owner can wait for
// every handler to return before destroying the service. gRPC's Server::Shutdown returns once
// every call is finished, and a handler that finishes its call inline (reactor->Finish) may
// still be running when it does: destroying the service then races the handler (TSan: "data
// race on vptr"). Close() after the server's shutdown, then destroy.

#include <condition_variable>
#include <mutex>

namespace trainscope {

// Thread-safe.
class CallGate {
 public:
  // One handler's passage; converts to false when the gate is closed (answer UNAVAILABLE then).
  class Pass {
   public:
    explicit Pass(CallGate* gate) : gate_(gate) {}
    Pass(Pass&& other) noexcept : gate_(other.gate_) { other.gate_ = nullptr; }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    Pass& operator=(Pass&&) = delete;
    ~Pass() {
      if (gate_ != nullptr) gate_->Leave();
    }
    explicit operator bool() const { return gate_ != nullptr; }

   private:
    CallGate* gate_;
  };

  // Enters the gate, unless it is closed (the Pass is then false and holds nothing).
  Pass Enter() {
    std::lock_guard lock(mu_);
    if (closed_) return Pass(nullptr);
    ++inside_;
    return Pass(this);
  }

  // Refuses new passages and waits until every handler inside has left. Idempotent.
  void Close() {
    std::unique_lock lock(mu_);
    closed_ = true;
    left_.wait(lock, [&] { return inside_ == 0; });
  }

 private:
  void Leave() {
    std::lock_guard lock(mu_);
    if (--inside_ == 0) left_.notify_all();
  }

  std::mutex mu_;  // Guards inside_ and closed_.
  std::condition_variable left_;
  int inside_ = 0;
  bool closed_ = false;
};

}  // namespace trainscope

#pragma once
// A task's patience with ps tasks that fail for a transient reason (stopped, restarting, cut off,
// too slow for the deadline). One outage runs from the first failed call until a round of calls
// gets through again, across calls, and may last --ps_patience_s. It is said in the log when it
// begins, every log_every_s while it lasts, and when it ends, with how long it took. Time comes
// in as a value and log lines go out as values: tested alone (tests/patience_test.cc).

#include <optional>
#include <string>
#include <vector>

namespace trainscope {

// Thread-compatible: the training thread that makes the calls owns it.
class Patience {
 public:
  // A call that failed for a transient reason: to whom, and why in words.
  struct Failure {
    std::string peer;  // "ps:0"
    std::string address;
    std::string cause;
  };

  // `self`: this task's short name, for the log; `patience_s`: how long an outage may last.
  Patience(std::string self, double patience_s, double log_every_s = 10);

  // A round of `method` calls ended at `now` with these transient failures (at least one). The
  // line to log when the outage begins here or its periodic note is due; otherwise nothing.
  std::optional<std::string> Failed(double now, const std::string& method,
                                    const std::vector<Failure>& failures);
  // A round ended at `now` with no transient failure. When that ends an outage: the line to log.
  std::optional<std::string> Succeeded(double now);

  // Seconds the current outage has lasted at `now`; 0 when there is none.
  double Waited(double now) const { return start_ < 0 ? 0 : now - start_; }
  // The current outage has lasted the whole patience: stop retrying.
  bool Exhausted(double now) const { return start_ >= 0 && Waited(now) >= patience_s_; }
  double patience_s() const { return patience_s_; }

 private:
  const std::string self_;
  const double patience_s_;
  const double log_every_s_;
  double start_ = -1;      // When the current outage began; -1: none.
  double next_log_ = 0;    // When the next "still waiting" line is due.
  std::string waited_on_;  // Whom it began waiting on, for the closing line.
};

// "ps:0 at host:2222 (connection refused)", joined with ", ".
std::string DescribeFailures(const std::vector<Patience::Failure>& failures);

}  // namespace trainscope

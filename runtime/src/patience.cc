// A task's patience with ps tasks that fail transiently; see patience.h.
#include "patience.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"

namespace trainscope {

Patience::Patience(std::string self, double patience_s, double log_every_s)
    : self_(std::move(self)), patience_s_(patience_s), log_every_s_(log_every_s) {}

std::string DescribeFailures(const std::vector<Patience::Failure>& failures) {
  return absl::StrJoin(failures, ", ", [](std::string* out, const Patience::Failure& f) {
    absl::StrAppend(out, f.peer, " at ", f.address, " (", f.cause, ")");
  });
}

std::optional<std::string> Patience::Failed(double now, const std::string& method,
                                            const std::vector<Failure>& failures) {
  if (start_ < 0) {
    start_ = now;
    next_log_ = now + log_every_s_;
    std::vector<std::string> peers;
    for (const Failure& f : failures) peers.push_back(f.peer);
    waited_on_ = absl::StrJoin(peers, ", ");
    return absl::StrCat(self_, " waits on ", DescribeFailures(failures), ": ", method,
                        " failed; retrying for up to ", HumanDuration(patience_s_),
                        " (--ps_patience_s)");
  }
  if (now < next_log_) return std::nullopt;
  next_log_ = now + log_every_s_;
  return absl::StrCat(self_, " still waits on ", DescribeFailures(failures), " in ", method, ": ",
                      HumanDuration(Waited(now)), " so far, gives up after ",
                      HumanDuration(patience_s_), " (--ps_patience_s)");
}

std::optional<std::string> Patience::Succeeded(double now) {
  if (start_ < 0) return std::nullopt;
  const double waited = Waited(now);
  start_ = -1;
  return absl::StrCat(self_, " reached ", waited_on_, " again after waiting ",
                      HumanDuration(waited), ": training goes on");
}

}  // namespace trainscope

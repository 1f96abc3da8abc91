// The incidents in words for a terminal; see incident_text.h.
#include "trainscope/sidecar/incident_text.h"

#include <time.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "trainscope/common/clock.h"

namespace trainscope::sidecar {
namespace {

// Lines and rows beyond these are counted, not printed.
constexpr int kMaxLines = 1000;

// `text` made printable and cut to exactly `width` columns (padded with spaces).
std::string Cell(std::string_view text, size_t width) {
  std::string s = Printable(text, width);
  if (s.size() < width) s.append(width - s.size(), ' ');
  return s;
}

// `text` as lines of at most `width` bytes, broken at spaces where it can, each after `indent`.
std::string Wrapped(std::string_view text, size_t width, std::string_view indent) {
  std::string out;
  const size_t room = width > indent.size() + 20 ? width - indent.size() : 20;
  while (!text.empty()) {
    size_t take = text.size();
    if (take > room) {
      const size_t space = text.rfind(' ', room);
      take = space == std::string_view::npos || space < room / 2 ? room : space;
    }
    out.append(indent).append(text.substr(0, take)).append("\n");
    text.remove_prefix(take);
    while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  }
  return out;
}

double Duration(const pb::Incident& in, double now_unix) {
  const double end = in.open() || in.ended() <= 0 ? now_unix : in.ended();
  return std::max(0.0, end - in.started());
}

std::string Strftime(double unix_seconds, const char* format) {
  if (!std::isfinite(unix_seconds) || unix_seconds <= 0 || unix_seconds > 1e11) return "-";
  const time_t t = static_cast<time_t>(unix_seconds);
  struct tm local;
  if (localtime_r(&t, &local) == nullptr) return "-";
  char buf[64];
  return strftime(buf, sizeof(buf), format, &local) ? std::string(buf) : "-";
}

}  // namespace

std::string Printable(std::string_view text, size_t max) {
  std::string clean = CleanText(text, max);
  const bool cut = text.size() > max;
  std::string out;
  out.reserve(clean.size());
  for (size_t i = 0; i < clean.size(); ++i) {
    const unsigned char c = clean[i];
    if (c < 0x20 || c == 0x7f) {
      out.push_back('?');
    } else if (c == 0xc2 && i + 1 < clean.size() &&
               static_cast<unsigned char>(clean[i + 1]) < 0xa0) {
      out.push_back('?');  // U+0080..U+009F: C1 controls (CSI among them).
      ++i;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (cut && max >= 3) {
    while (out.size() > max - 3) {
      // Back to a character boundary, then room for the dots.
      out.pop_back();
      while (!out.empty() && (static_cast<unsigned char>(out.back()) & 0xc0) == 0x80) {
        out.pop_back();
      }
      if (!out.empty() && static_cast<unsigned char>(out.back()) >= 0xc0) out.pop_back();
    }
    out += "...";
  }
  return out;
}

std::string When(double unix_seconds, double now_unix) {
  const double ago = now_unix - unix_seconds;
  if (std::isfinite(ago) && ago >= -1 && ago < 120) {
    return absl::StrFormat("%.0f s ago", std::max(0.0, ago));
  }
  if (std::isfinite(ago) && ago >= 0 && ago < 3600) {
    return absl::StrFormat("%.0f min ago", std::floor(ago / 60));
  }
  return Strftime(unix_seconds, "%b %d %H:%M");
}

std::string LocalTime(double unix_seconds) {
  const std::string day = Strftime(unix_seconds, "%Y-%m-%d %H:%M:%S");
  if (day == "-") return day;
  const int ms = static_cast<int>((unix_seconds - std::floor(unix_seconds)) * 1000) % 1000;
  return absl::StrFormat("%s.%03d %s", day, ms, Strftime(unix_seconds, "%z"));
}

std::string CauseWords(const pb::IncidentCause& c) {
  if (c.kind() == "node") return absl::StrCat("node ", c.node());
  if (c.kind() == "link") {
    // Between two nodes (both directions are one link), or from a task to its peer.
    if (c.task().empty()) return absl::StrCat(c.node(), " <-> ", c.peer());
    return absl::StrCat(c.task(), " -> ", c.peer());
  }
  if (!c.task().empty()) return c.task();
  return c.kind().empty() ? "?" : c.kind();
}

// "task worker:0 on node n1: <its reason>", "node n3", "link n1 <-> n2".
std::string CauseLine(const pb::Incident& in) {
  const pb::IncidentCause& c = in.cause();
  const bool node = c.kind() == "node";  // "node n3" says its kind already.
  std::string out = node ? "" : absl::StrCat(Printable(c.kind(), 20), " ");
  absl::StrAppend(&out, Printable(CauseWords(c), 200));
  if (!node && !c.task().empty() && !c.node().empty()) {
    absl::StrAppend(&out, " on node ", Printable(c.node(), 80));
  }
  if (!in.cause_reason().empty()) absl::StrAppend(&out, ": ", Printable(in.cause_reason(), 500));
  return out;
}

std::string GoodputLine(const pb::Goodput& g) {
  const double counted = g.elapsed_seconds() - g.idle_seconds();
  if (!(counted > 0)) return "goodput: no worker time counted yet\n";
  std::string out = absl::StrFormat("goodput %.1f%% of %s of worker time", g.goodput() * 100,
                                    HumanDuration(counted));
  // The kinds that cost the most first.
  std::vector<std::pair<double, std::string>> lost;
  for (const auto& [kind, seconds] : g.lost_by_kind()) {
    if (seconds > 0) lost.emplace_back(seconds, kind);
  }
  std::sort(lost.rbegin(), lost.rend());
  if (lost.size() > 20) lost.resize(20);
  std::vector<std::string> words;
  for (const auto& [seconds, kind] : lost) {
    words.push_back(absl::StrCat(Printable(kind, 20), " ", HumanDuration(seconds)));
  }
  if (!words.empty()) absl::StrAppend(&out, "; lost: ", absl::StrJoin(words, ", "));
  if (g.down_seconds() > 0) absl::StrAppend(&out, "; down ", HumanDuration(g.down_seconds()));
  if (g.redone_seconds() > 0) {
    absl::StrAppend(&out, "; redone ", HumanDuration(g.redone_seconds()));
  }
  return out + "\n";
}

std::string IncidentsTable(const pb::IncidentList& list, double now_unix, int width, int max_rows) {
  std::string out;
  if (list.incidents_size() == 0) {
    absl::StrAppend(&out, "no incidents held by node ", Printable(list.node(), 80), " (cluster ",
                    Printable(list.cluster(), 80), ")\n");
  } else {
    absl::StrAppend(&out, Cell("ID", 16), " ", Cell("STATE", 6), " ", Cell("KIND", 11), " ",
                    Cell("CAUSE", 18), " ", Cell("STARTED", 12), " ", Cell("DURATION", 12), " ",
                    Cell("LOST", 12), " TASKS\n");
  }
  int shown = 0;
  for (const pb::Incident& in : list.incidents()) {
    if (shown++ >= max_rows) break;
    absl::StrAppend(&out, Cell(in.id(), 16), " ", Cell(in.open() ? "open" : "closed", 6), " ",
                    Cell(in.kind(), 11), " ", Cell(CauseWords(in.cause()), 18), " ",
                    Cell(When(in.started(), now_unix), 12), " ",
                    Cell(HumanDuration(Duration(in, now_unix)), 12), " ",
                    Cell(HumanDuration(in.lost_seconds()), 12), " ", in.affected_size(), "\n");
    if (!in.summary().empty()) {
      absl::StrAppend(&out, Wrapped(Printable(in.summary(), 600), width, "    "));
    }
  }
  if (list.incidents_size() > max_rows) {
    absl::StrAppend(&out, "... and ", list.incidents_size() - max_rows, " more\n");
  }
  int open = 0;
  for (const pb::Incident& in : list.incidents()) open += in.open();
  if (list.incidents_size() > 0) {
    absl::StrAppend(&out, list.incidents_size(), " incident(s), ", open, " open\n");
  }
  out += GoodputLine(list.goodput());
  if (!list.store_error().empty()) {  // A full disk: said, as the page says it.
    absl::StrAppend(
        &out, Wrapped(absl::StrCat("NOT KEPT ON DISK: ", Printable(list.store_error(), 600)), width,
                      "    "));
  }
  return out;
}

std::string TimelineText(const pb::Incident& in) {
  std::string out;
  int n = 0;
  for (const pb::IncidentEvent& e : in.timeline()) {
    if (n++ >= kMaxLines) {
      absl::StrAppend(&out, "... and ", in.timeline_size() - kMaxLines, " more\n");
      break;
    }
    absl::StrAppend(&out, LocalTime(e.unix_seconds()), "  ", Printable(e.text(), 1000), "\n");
  }
  return out;
}

std::string IncidentText(const pb::Incident& in, double now_unix) {
  std::string out =
      absl::StrCat("incident ", Printable(in.id(), 64), " (", in.open() ? "open" : "closed", ", ",
                   Printable(in.kind(), 20), ") in cluster ", Printable(in.cluster(), 80));
  if (!in.owner().empty()) absl::StrAppend(&out, ", owned by node ", Printable(in.owner(), 80));
  for (int i = 0; i < in.former_ids_size() && i < 4; ++i) {
    absl::StrAppend(&out, i == 0 ? " (named " : ", ", Printable(in.former_ids(i), 64));
  }
  if (in.former_ids_size() > 0) out += " by this node before its owner's name reached it)";
  out += "\n";
  if (!in.summary().empty())
    absl::StrAppend(&out, Wrapped(Printable(in.summary(), 1000), 100, "  "));
  absl::StrAppend(&out, "cause:    ", CauseLine(in));
  absl::StrAppend(&out, "\nstarted:  ", LocalTime(in.started()), " (", When(in.started(), now_unix),
                  ")\n");
  if (in.open()) {
    absl::StrAppend(&out, "open for: ", HumanDuration(Duration(in, now_unix)), "\n");
  } else {
    absl::StrAppend(&out, "ended:    ", LocalTime(in.ended()), " (after ",
                    HumanDuration(Duration(in, now_unix)), ")\n");
  }
  absl::StrAppend(&out, "lost:     ", HumanDuration(in.lost_seconds()), " of training\n");
  if (!in.outlier().empty()) {
    absl::StrAppend(&out, "outlier:  ", Printable(in.outlier(), 1000), "\n");
  }

  absl::StrAppend(&out, "\naffected tasks (", in.affected_size(), "):\n");
  int n = 0;
  for (const pb::AffectedTask& a : in.affected()) {
    if (n++ >= kMaxLines) break;
    absl::StrAppend(&out, "  ", Cell(a.task(), 12), " ", Cell(a.how(), 9), " since ",
                    LocalTime(a.since()));
    if (a.until() > 0) absl::StrAppend(&out, " until ", LocalTime(a.until()));
    absl::StrAppend(&out, ", lost ", HumanDuration(a.lost_seconds()), "\n");
    if (!a.waits_in().empty()) {
      absl::StrAppend(&out, "    waits in ", Printable(a.waits_in(), 200), "\n");
    }
  }
  absl::StrAppend(&out, "\ntimeline:\n", TimelineText(in));
  absl::StrAppend(&out, "\nevidence (", in.evidence_size(), "):\n");
  n = 0;
  for (const pb::IncidentEvidence& e : in.evidence()) {
    if (n++ >= kMaxLines) break;
    absl::StrAppend(&out, "  ", LocalTime(e.unix_seconds()), "  ", Printable(e.kind(), 20), " ",
                    Printable(e.task(), 40));
    if (!e.trace_id().empty()) absl::StrAppend(&out, " trace ", Printable(e.trace_id(), 64));
    if (e.has_snapshot()) {
      absl::StrAppend(&out, " (", e.snapshot().threads_size(), " threads)");
    }
    if (!e.summary().empty()) absl::StrAppend(&out, ": ", Printable(e.summary(), 300));
    out += "\n";
  }
  return out;
}

std::string SafeFileName(std::string_view name) {
  std::string out;
  for (char c : name.substr(0, 64)) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    out.push_back(ok ? c : '_');
  }
  if (out.empty()) return "_";
  if (out.front() == '.') out.front() = '_';
  return out;
}

}  // namespace trainscope::sidecar

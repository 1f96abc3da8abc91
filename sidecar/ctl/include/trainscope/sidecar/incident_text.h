#pragma once
// The incidents as a person reads them in a terminal (trainscopectl incidents / incident): a table
// of /api/v1/incidents with the job's goodput under it, and one incident in full. Pure functions
// of the messages and the time (`now_unix`, for "12 s ago"); every string from the sidecar is
// cut and stripped of control characters before it is printed. Thread-safe (no state).

#include <string>
#include <string_view>

#include "trainscope/sidecar/api.h"

namespace trainscope::sidecar {

// `text` with control characters (escape sequences included) replaced by '?' and cut to `max`
// bytes (on a character boundary, "..." at the end when cut): safe to print.
std::string Printable(std::string_view text, size_t max = 200);

// When `unix_seconds` was, for a person: "12 s ago" within the hour, else the local date and
// time ("2024-05-01 14:03:07").
std::string When(double unix_seconds, double now_unix);

// The local date and time with the zone, to the millisecond: "2024-05-01 14:03:07.123 +0200".
std::string LocalTime(double unix_seconds);

// What caused it in a few words: "ps:1", "node n2", "worker:0 -> ps:1".
std::string CauseWords(const pb::IncidentCause& cause);

// One line of the job's goodput: "goodput 93.1% of 4 min 10 s of worker time; lost: dead 12 s,
// partition 3 s; down 5 s". "no worker time counted yet" when nothing elapsed.
std::string GoodputLine(const pb::Goodput& goodput);

// The table of `list`: a header, then per incident one row (id, open/closed, kind, cause,
// started, duration, lost training seconds, affected tasks) and its summary on the next line,
// indented and wrapped to `width` columns; then the goodput line. At most `max_rows` incidents
// are shown (a line says how many more).
std::string IncidentsTable(const pb::IncidentList& list, double now_unix, int width = 100,
                           int max_rows = 1000);

// One incident in full: summary, cause, the affected tasks (how, where they wait, since, lost),
// the timeline with its times, and the evidence kept.
std::string IncidentText(const pb::Incident& incident, double now_unix);

// The timeline alone, one line per event: "<local time>  <text>".
std::string TimelineText(const pb::Incident& incident);

// A name for a file made from a task's or an id's name: every byte but [A-Za-z0-9._-] becomes
// '_' ("worker:0" -> "worker_0"), a leading '.' too, cut to 64 bytes; "_" for "".
std::string SafeFileName(std::string_view name);

}  // namespace trainscope::sidecar

// Task logging through spdlog: readable text by default, JSON lines on request; both carry the
// trace id of the call a line is about.
#include <memory>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/spdlog.h"
#include "trainscope/runtime/task.h"
#include "trainscope/telemetry/context.h"

namespace trainscope {
namespace {

// %* in a text pattern: " trace=<id>" when the line is about a traced call.
class TraceIdFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    const std::string id = telemetry::CurrentTraceId();
    if (id.empty()) return;
    static constexpr char kPrefix[] = " trace=";
    dest.append(kPrefix, kPrefix + sizeof(kPrefix) - 1);
    dest.append(id.data(), id.data() + id.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<TraceIdFlag>();
  }
};

void AppendJsonString(spdlog::memory_buf_t& dest, absl::string_view s) {
  dest.push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        dest.append(std::string_view("\\\""));
        break;
      case '\\':
        dest.append(std::string_view("\\\\"));
        break;
      case '\n':
        dest.append(std::string_view("\\n"));
        break;
      case '\r':
        dest.append(std::string_view("\\r"));
        break;
      case '\t':
        dest.append(std::string_view("\\t"));
        break;
      default:
        if (c < 0x20) {
          char buf[8];
          snprintf(buf, sizeof(buf), "\\u%04x", c);
          dest.append(std::string_view(buf));
        } else {
          dest.push_back(static_cast<char>(c));
        }
    }
  }
  dest.push_back('"');
}

// One JSON object per line: time, level, task, trace_id (when any), msg.
class JsonFormatter final : public spdlog::formatter {
 public:
  explicit JsonFormatter(std::string task) : task_(std::move(task)) {}

  void format(const spdlog::details::log_msg& msg, spdlog::memory_buf_t& dest) override {
    const auto micros =
        std::chrono::duration_cast<std::chrono::microseconds>(msg.time.time_since_epoch()).count();
    const std::time_t seconds = static_cast<std::time_t>(micros / 1000000);
    std::tm tm{};
    gmtime_r(&seconds, &tm);
    char time[40];
    const size_t n = std::strftime(time, sizeof(time), "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(time + n, sizeof(time) - n, ".%06lldZ", static_cast<long long>(micros % 1000000));
    dest.append(std::string_view("{\"time\":\""));
    dest.append(std::string_view(time));
    dest.append(std::string_view("\",\"level\":\""));
    const auto level = spdlog::level::to_string_view(msg.level);
    dest.append(level.data(), level.data() + level.size());
    dest.append(std::string_view("\",\"task\":"));
    AppendJsonString(dest, task_);
    const std::string trace_id = telemetry::CurrentTraceId();
    if (!trace_id.empty()) {
      dest.append(std::string_view(",\"trace_id\":\""));
      dest.append(trace_id.data(), trace_id.data() + trace_id.size());
      dest.push_back('"');
    }
    dest.append(std::string_view(",\"msg\":"));
    AppendJsonString(dest, absl::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(std::string_view("}\n"));
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>(task_);
  }

 private:
  std::string task_;
};

}  // namespace

void InitLogging(const std::string& task_name, const std::string& format) {
  if (format == "json") {
    spdlog::set_formatter(std::make_unique<JsonFormatter>(task_name));
    return;
  }
  auto formatter = std::make_unique<spdlog::pattern_formatter>();
  formatter->add_flag<TraceIdFlag>('*').set_pattern(
      absl::StrCat("%Y-%m-%d %H:%M:%S.%e %^%L%$ ", task_name, "%* %v"));
  spdlog::set_formatter(std::move(formatter));
}

}  // namespace trainscope

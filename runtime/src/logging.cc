// Task logging through spdlog: readable text by default, JSON lines on request; both carry the
// trace id of the call a line is about.
#include <memory>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
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
    static constexpr char kTracePrefix[] = " trace=";
    dest.append(kTracePrefix, kTracePrefix + sizeof(kTracePrefix) - 1);
    dest.append(id.data(), id.data() + id.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<TraceIdFlag>();
  }
};

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
    nlohmann::ordered_json line;
    line["time"] = time;
    const auto level = spdlog::level::to_string_view(msg.level);
    line["level"] = std::string(level.data(), level.size());
    line["task"] = task_;
    if (std::string trace_id = telemetry::CurrentTraceId(); !trace_id.empty()) {
      line["trace_id"] = std::move(trace_id);
    }
    line["msg"] = std::string(msg.payload.data(), msg.payload.size());
    // Bytes that are not UTF-8 become U+FFFD: every line stays valid JSON.
    const std::string text = line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    dest.append(text.data(), text.data() + text.size());
    dest.push_back('\n');
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

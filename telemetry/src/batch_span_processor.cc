// The BatchSpanProcessor's queue and export thread. See batch_span_processor.h.
#include "trainscope/telemetry/batch_span_processor.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace trainscope::telemetry {
namespace {

BatchSpanProcessorOptions Sanitize(BatchSpanProcessorOptions options) {
  options.max_queue_size = std::max<size_t>(options.max_queue_size, 1);
  options.max_export_batch_size =
      std::clamp<size_t>(options.max_export_batch_size, 1, options.max_queue_size);
  options.schedule_delay_ms = std::max(options.schedule_delay_ms, 1);
  return options;
}

// Reads a positive integer variable into `*value`; appends to `*problems` when it is set but
// not usable.
void ReadPositive(const char* name, int64_t max, int64_t* value, std::string* problems) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return;
  int64_t parsed = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(env), &parsed) || parsed < 1 || parsed > max) {
    absl::StrAppend(problems, problems->empty() ? "" : "; ", name, "=\"", env,
                    "\" is not a whole number in 1-", max, "; using ", *value);
    return;
  }
  *value = parsed;
}

}  // namespace

SpanExporter::~SpanExporter() = default;

BatchSpanProcessorOptions BatchSpanProcessorOptionsFromEnv(std::string* warning) {
  BatchSpanProcessorOptions options;
  std::string problems;
  int64_t queue = static_cast<int64_t>(options.max_queue_size);
  int64_t batch = static_cast<int64_t>(options.max_export_batch_size);
  int64_t delay = options.schedule_delay_ms;
  ReadPositive("OTEL_BSP_MAX_QUEUE_SIZE", 1 << 24, &queue, &problems);
  ReadPositive("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1 << 24, &batch, &problems);
  ReadPositive("OTEL_BSP_SCHEDULE_DELAY", 24 * 3600 * 1000, &delay, &problems);
  if (batch > queue) {
    absl::StrAppend(&problems, problems.empty() ? "" : "; ", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE ",
                    batch, " is larger than the queue (", queue, "); using ", queue);
    batch = queue;
  }
  options.max_queue_size = static_cast<size_t>(queue);
  options.max_export_batch_size = static_cast<size_t>(batch);
  options.schedule_delay_ms = static_cast<int>(delay);
  if (warning != nullptr) *warning = std::move(problems);
  return options;
}

BatchSpanProcessor::BatchSpanProcessor(std::unique_ptr<SpanExporter> exporter,
                                       BatchSpanProcessorOptions options, TracingStats* stats)
    : options_(Sanitize(options)),
      wake_threshold_(std::max<size_t>(
          1, std::min(options_.max_export_batch_size, options_.max_queue_size / 2))),
      exporter_(std::move(exporter)),
      stats_(stats != nullptr ? stats : &own_stats_) {
  queue_.reserve(options_.max_queue_size);
  thread_ = std::thread([this] { Run(); });
}

BatchSpanProcessor::~BatchSpanProcessor() {
  Shutdown(std::chrono::milliseconds(5000)).IgnoreError();
}

void BatchSpanProcessor::OnEnd(SpanData&& span) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_ || queue_.size() >= options_.max_queue_size) {
      stats_->spans_dropped.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    queue_.push_back(std::move(span));
    if (!woken_ && queue_.size() >= wake_threshold_) {
      woken_ = true;
      wake = true;
    }
  }
  if (wake) wake_.notify_one();
}

absl::Status BatchSpanProcessor::ForceFlush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  if (stopping_) return absl::FailedPreconditionError("span processor is shut down");
  const uint64_t target = ++flush_requested_;
  wake_.notify_one();
  if (!flushed_.wait_for(lock, timeout, [&] { return flush_done_ >= target || stopped_; })) {
    return absl::DeadlineExceededError(
        absl::StrCat("span export did not finish within ", timeout.count(), " ms"));
  }
  return absl::OkStatus();
}

absl::Status BatchSpanProcessor::Shutdown(std::chrono::milliseconds timeout) {
  std::lock_guard<std::mutex> serialize(shutdown_mu_);
  if (!thread_.joinable()) return absl::OkStatus();
  bool finished;
  {
    std::unique_lock<std::mutex> lock(mu_);
    stopping_ = true;
    wake_.notify_one();
    finished = flushed_.wait_for(lock, timeout, [&] { return stopped_; });
    if (!finished) abandon_ = true;
  }
  thread_.join();
  if (!finished) {
    return absl::DeadlineExceededError(absl::StrCat(
        "span export did not finish within ", timeout.count(), " ms; unexported spans dropped"));
  }
  return absl::OkStatus();
}

void BatchSpanProcessor::Run() {
  std::vector<SpanData> taken;
  taken.reserve(options_.max_queue_size);
  const auto delay = std::chrono::milliseconds(options_.schedule_delay_ms);
  auto next_export = std::chrono::steady_clock::now() + delay;
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    wake_.wait_until(lock, next_export,
                     [&] { return woken_ || stopping_ || flush_requested_ != flush_done_; });
    woken_ = false;
    const uint64_t flush_target = flush_requested_;
    const bool stop = stopping_;
    if (abandon_) break;
    taken.swap(queue_);  // queue_ keeps the capacity `taken` had.
    lock.unlock();
    ExportAll(taken);
    taken.clear();
    next_export = std::chrono::steady_clock::now() + delay;
    lock.lock();
    flush_done_ = flush_target;
    flushed_.notify_all();
    if (stop) break;  // stopping_ was set before the swap: queue_ has stayed empty.
  }
  stats_->spans_dropped.fetch_add(queue_.size(), std::memory_order_relaxed);
  queue_.clear();
  stopped_ = true;
  flushed_.notify_all();
}

void BatchSpanProcessor::ExportAll(std::vector<SpanData>& spans) {
  std::vector<SpanData> batch;
  for (size_t begin = 0; begin < spans.size(); begin += options_.max_export_batch_size) {
    const size_t end = std::min(spans.size(), begin + options_.max_export_batch_size);
    if (begin > 0) {
      std::lock_guard<std::mutex> lock(mu_);
      if (abandon_) {
        stats_->spans_dropped.fetch_add(spans.size() - begin, std::memory_order_relaxed);
        return;
      }
    }
    std::vector<SpanData>* to_send = &spans;
    if (begin > 0 || end < spans.size()) {
      batch.clear();
      batch.reserve(end - begin);
      std::move(spans.begin() + begin, spans.begin() + end, std::back_inserter(batch));
      to_send = &batch;
    }
    const size_t count = end - begin;
    absl::Status status = exporter_->Export(*to_send);
    if (status.ok()) {
      stats_->spans_exported.fetch_add(count, std::memory_order_relaxed);
    } else {
      stats_->export_failures.fetch_add(1, std::memory_order_relaxed);
      stats_->spans_failed.fetch_add(count, std::memory_order_relaxed);
    }
  }
}

}  // namespace trainscope::telemetry

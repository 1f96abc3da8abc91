#pragma once
// The input format of the fuzzers that replay a conversation rather than one message: a sequence
// of records, each a tag byte, a 2-byte little-endian length and that many bytes (cut short at
// the end of the input). The tag picks what the payload is (a request, an answer, a delay), so
// one input drives the code through several messages in a row. Seeds are written the same way
// (seed_writer.cc), and libFuzzer's mutations keep most records intact.

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace trainscope::fuzz {

struct Record {
  uint8_t tag = 0;
  absl::string_view payload;
};

// Walks the records of one input. Not thread-safe; the input must outlive it.
class RecordReader {
 public:
  RecordReader(const uint8_t* data, size_t size)
      : data_(reinterpret_cast<const char*>(data)), size_(size) {}

  // The next record, false at the end of the input.
  bool Next(Record* record) {
    if (pos_ >= size_) return false;
    record->tag = static_cast<uint8_t>(data_[pos_++]);
    size_t length = 0;
    for (int i = 0; i < 2 && pos_ < size_; ++i, ++pos_) {
      length |= static_cast<size_t>(static_cast<uint8_t>(data_[pos_])) << (8 * i);
    }
    length = std::min(length, size_ - pos_);
    record->payload = absl::string_view(data_ + pos_, length);
    pos_ += length;
    return true;
  }

 private:
  const char* data_;
  size_t size_;
  size_t pos_ = 0;
};

// One record in that format (for the seed writer).
inline std::string EncodeRecord(uint8_t tag, const std::string& payload) {
  std::string out(1, static_cast<char>(tag));
  const size_t length = std::min<size_t>(payload.size(), 0xffff);
  out.push_back(static_cast<char>(length & 0xff));
  out.push_back(static_cast<char>(length >> 8));
  out.append(payload, 0, length);
  return out;
}

}  // namespace trainscope::fuzz

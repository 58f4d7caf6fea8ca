// The Mooncake request traces (FAST'25), JSON Lines (json_lines.h).
//
// Grammar (tolerant: unknown fields are skipped, as published traces may grow
// keys; duplicate known fields are errors):
//   timestamp      int 0..2^33 x 1000 ms (required; the arrival bound of
//                  request.h); arrival = timestamp / 1000 s; never smaller than
//                  the record before
//   input_length   int 1..2^32-1 (required) -> prompt
//   output_length  int 1..2^32-1 (required) -> output
//   hash_ids       array of ints 0..2^62-1 (required; kMaxTraceHashId in
//                  request.h): one per 512-token block,
//                  exactly ceil(input_length / 512) of them
// The id is the record's line number. Example:
//   {"timestamp": 0, "input_length": 6955, "output_length": 52, "hash_ids": [0, 1, ... 13]}
#pragma once

#include <cstdint>
#include <memory>

#include "formats/requests/format_entry.h"
#include "formats/requests/json_lines.h"

namespace kvreplay::requests {

class MooncakeReader final : public JsonRequestReader {
 public:
  explicit MooncakeReader(std::unique_ptr<JsonLines> lines)
      : JsonRequestReader(std::move(lines), kMooncakeFields, false) {}
  InputStatus finish(const JsonRecord& record, Request& out) override;

 private:
  bool has_last_ = false;
  std::uint64_t last_timestamp_ms_ = 0;
};

// "mooncake": told by timestamp, input_length or output_length; tolerant.
extern const RequestFormatEntry kMooncakeFormat;

}  // namespace kvreplay::requests

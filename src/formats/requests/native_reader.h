// kvreplay's native request trace, JSON Lines (json_lines.h): one record a line.
//
// Grammar (strict: unknown and duplicate fields are errors):
//   arrival            number >= 0, seconds (required); never smaller than the
//                      record before
//   id                 any JSON value, kept as compact JSON text (at most 4096
//                      bytes); default: the record's line number
//   prompt             int 1..2^32-1 (required), prompt tokens including the prefix
//   output             int 1..2^32-1 (required), tokens to generate
//   n                  int 1..2^32-1, default 1: parallel samples
//   prefix             non-empty string: a named shared prefix
//   prefix_tokens      int 1..prompt, required with prefix (and only with it)
//   hash_ids           array of ints 0..2^62-1 (kMaxTraceHashId in request.h):
//                      one content hash per block of
//                      hash_block_tokens prompt tokens (the last may be partial),
//                      exactly ceil(prompt / hash_block_tokens) of them
//   hash_block_tokens  int >= 1, default 512; only with hash_ids
//   session            non-empty string: the conversation or client the request
//                      belongs to (the fleet's --router session keeps one on one
//                      instance)
//   start              string, first record only: the wall-clock instant of
//                      arrival 0 as "YYYY-MM-DD HH:MM:SS[.fraction]" (the grammar
//                      of azure_reader.h's TIMESTAMP), which convert keeps when it
//                      rebases a trace's times to 0; read and kept, never used
// arrival is at most 2^33 s (kMaxArrivalSeconds in request.h).
// Example:
//   {"arrival": 0.0, "start": "2023-11-16 18:15:46.6805900", "prompt": 1200, "output": 64,
//    "prefix": "sys", "prefix_tokens": 1000}
//   {"arrival": 0.5, "id": "req-2", "prompt": 600, "output": 8, "n": 2, "hash_ids": [17, 18]}
#pragma once

#include <memory>

#include "formats/requests/format_entry.h"
#include "formats/requests/json_lines.h"

namespace kvreplay::requests {

class NativeReader final : public JsonRequestReader {
 public:
  explicit NativeReader(std::unique_ptr<JsonLines> lines)
      : JsonRequestReader(std::move(lines), kNativeFields, true) {}
  InputStatus finish(const JsonRecord& record, Request& out) override;
  std::optional<std::string> start() const override { return start_; }

 private:
  std::optional<std::string> start_;
  bool has_last_ = false;
  double last_arrival_ = 0.0;
};

// "native": told by any native key but id, hash_ids and start (id or start
// alone: when no Mooncake key is there); strict.
extern const RequestFormatEntry kNativeFormat;

}  // namespace kvreplay::requests

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
//   hash_ids           array of ints 0..2^64-1: one content hash per block of
//                      hash_block_tokens prompt tokens (the last may be partial),
//                      exactly ceil(prompt / hash_block_tokens) of them
//   hash_block_tokens  int >= 1, default 512; only with hash_ids
// Example:
//   {"arrival": 0.0, "prompt": 1200, "output": 64, "prefix": "sys", "prefix_tokens": 1000}
//   {"arrival": 0.5, "id": "req-2", "prompt": 600, "output": 8, "n": 2, "hash_ids": [17, 18]}
#pragma once

#include <memory>

#include "formats/requests/json_lines.h"

namespace kvreplay::requests {

class NativeReader final : public JsonRequestReader {
 public:
  explicit NativeReader(std::unique_ptr<JsonLines> lines)
      : JsonRequestReader(std::move(lines), kNativeFields, true) {}
  InputStatus finish(const JsonRecord& record, Request& out) override;

 private:
  bool has_last_ = false;
  double last_arrival_ = 0.0;
};

}  // namespace kvreplay::requests

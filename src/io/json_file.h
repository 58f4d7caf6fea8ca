// One whole JSON document from a file, read as strictly and as boundedly as a
// trace line: what `compare` reads its reports and thresholds with.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

#include "core/result.h"

namespace kvreplay {

// Reads one JSON document with the traces' discipline (io/json_cursor.h):
// streamed from a file or "-" (gzip too), at most `max_bytes` of input, nesting,
// strings and the document's size in memory capped, duplicate keys, invalid
// UTF-8 and numbers out of a double's range refused, nothing after the
// document. Memory stays bounded whatever the file (/dev/zero, a huge one).
// Error: one line, "FILE:LINE: not valid JSON: PROBLEM" or "FILE: why".
// `too_large` ends the size cap's message: "larger than N MiB, TOO_LARGE".
Result<nlohmann::json, std::string> read_json_file(const std::string& path, std::uint64_t max_bytes,
                                                   std::string_view too_large);

// The same document and the text it was read from, for a reader that names
// the line of a key in its messages (a price file, a cost profile): the input
// is read once, so a FIFO or standard input works as a file does. The text is
// held whole (at most `max_bytes`, after gzip decompression).
struct JsonText {
  nlohmann::json document;
  std::string text;
};
Result<JsonText, std::string> read_json_text(const std::string& path, std::uint64_t max_bytes,
                                             std::string_view too_large);

}  // namespace kvreplay

#include "io/json_file.h"

#include <fmt/format.h>

#include "io/byte_source.h"
#include "io/json_cursor.h"

namespace kvreplay {

Result<nlohmann::json, std::string> read_json_file(const std::string& path, std::uint64_t max_bytes,
                                                   std::string_view too_large) {
  auto opened = ByteSource::open(path);
  if (!opened) return Unexpected{fmt::format("{}: cannot open: {}", path, opened.error())};
  ByteSource& source = *opened.value();
  source.set_limit(max_bytes, fmt::format("larger than {} MiB, {}", max_bytes >> 20, too_large));
  JsonCursor cursor(source, JsonCursor::Limits{max_bytes, max_bytes});
  auto problem = [&](const std::string& what) -> Unexpected<std::string> {
    // The source's own failure (I/O, gzip, the size cap) explains a parse error.
    if (!source.error().empty()) return Unexpected{fmt::format("{}: {}", path, source.error())};
    return Unexpected{fmt::format("{}:{}: not valid JSON: {}", path, cursor.line(), what)};
  };
  cursor.skip_byte_order_mark();
  if (cursor.peek() < 0) return problem("empty input");
  nlohmann::json document;
  if (auto read = cursor.read_value(document); !read) return problem(read.error());
  if (cursor.peek() >= 0) {
    return problem(fmt::format("unexpected {} after the document", cursor.describe_next()));
  }
  if (!source.error().empty()) return Unexpected{fmt::format("{}: {}", path, source.error())};
  return document;
}

}  // namespace kvreplay

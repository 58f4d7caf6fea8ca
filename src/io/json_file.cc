#include "io/json_file.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <memory>

#include "io/byte_source.h"
#include "io/json_cursor.h"
#include "io/read_once.h"

namespace kvreplay {

namespace {

// One document from `source` (already capped), with the discipline above.
Result<nlohmann::json, std::string> parse_document(ByteSource& source, const std::string& path,
                                                   std::uint64_t max_bytes) {
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

Result<std::unique_ptr<ByteSource>, std::string> open_capped(const std::string& path,
                                                             std::uint64_t max_bytes,
                                                             std::string_view too_large) {
  auto opened = ByteSource::open(path);
  if (!opened) return Unexpected{fmt::format("{}: cannot open: {}", path, opened.error())};
  opened.value()->set_limit(max_bytes,
                            fmt::format("larger than {} MiB, {}", max_bytes >> 20, too_large));
  return std::move(opened).value();
}

Result<nlohmann::json, std::string> read_json_now(const std::string& path, std::uint64_t max_bytes,
                                                  std::string_view too_large) {
  auto source = open_capped(path, max_bytes, too_large);
  if (!source) return Unexpected{source.error()};
  return parse_document(*source.value(), path, max_bytes);
}

// Whether `path` gives its bytes once: standard input, a FIFO, a device.
bool readable_once(const std::string& path) {
  struct stat info {};
  return path == "-" || (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode));
}

}  // namespace

Result<nlohmann::json, std::string> read_json_file(const std::string& path, std::uint64_t max_bytes,
                                                   std::string_view too_large) {
  if (!readable_once(path)) return read_json_now(path, max_bytes, too_large);
  // Named twice in one run (compare F F, plan-merge F F), it is read once.
  struct Tag;
  return read_once<Tag>(
      path, [&](const std::string& file) { return read_json_now(file, max_bytes, too_large); });
}

Result<JsonText, std::string> read_json_text(const std::string& path, std::uint64_t max_bytes,
                                             std::string_view too_large) {
  auto opened = open_capped(path, max_bytes, too_large);
  if (!opened) return Unexpected{opened.error()};
  ByteSource& source = *opened.value();
  JsonText out;
  while (source.refill()) {
    out.text.append(source.begin(), source.end());
    source.advance_to(source.end());
  }
  if (!source.error().empty()) return Unexpected{fmt::format("{}: {}", path, source.error())};
  auto copy = ByteSource::from_string(out.text);
  auto document = parse_document(*copy, path, max_bytes);
  if (!document) return Unexpected{document.error()};
  out.document = std::move(document).value();
  return out;
}

}  // namespace kvreplay

#include "formats/requests/native_writer.h"

#include <fmt/format.h>

#include <iterator>

#include "io/json_text.h"

namespace kvreplay {

void append_native_json(std::string& out, const Request& request, std::string_view start) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"arrival\": {}, ", request.arrival);
  if (!start.empty()) {
    out += "\"start\": ";
    append_json_string(out, start);
    out += ", ";
  }
  out += "\"id\": ";
  if (request.id.empty()) {
    fmt::format_to(it, "{}", request.line);
  } else {
    out += request.id;
  }
  fmt::format_to(it, ", \"prompt\": {}, \"output\": {}", request.prompt, request.output);
  if (request.n != 1) fmt::format_to(it, ", \"n\": {}", request.n);
  if (!request.session.empty()) {
    out += ", \"session\": ";
    append_json_string(out, request.session);
  }
  if (!request.prefix.empty()) {
    out += ", \"prefix\": ";
    append_json_string(out, request.prefix);
    fmt::format_to(it, ", \"prefix_tokens\": {}", request.prefix_tokens);
  }
  if (!request.hash_ids.empty()) {
    fmt::format_to(it, ", \"hash_block_tokens\": {}, \"hash_ids\": [", request.hash_block_tokens);
    bool first = true;
    for (std::uint64_t id : request.hash_ids) {
      if (!first) out += ", ";
      first = false;
      fmt::format_int text(id);
      out.append(text.data(), text.size());
    }
    out += ']';
  }
  out += "}\n";
}

}  // namespace kvreplay

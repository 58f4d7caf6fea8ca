// Small helpers for writing JSON text by hand (request ids, converted records).
#pragma once

#include <string>
#include <string_view>

namespace kvreplay {

// Appends `text` (valid UTF-8) as a JSON string literal: quotes, backslashes and
// control characters escaped, everything else verbatim.
inline void append_json_string(std::string& out, std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  for (char ch : text) {
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(ch) < 0x20) {
          out += "\\u00";
          out.push_back(kHex[(static_cast<unsigned char>(ch) >> 4) & 0xF]);
          out.push_back(kHex[static_cast<unsigned char>(ch) & 0xF]);
        } else {
          out.push_back(ch);
        }
    }
  }
  out.push_back('"');
}

}  // namespace kvreplay

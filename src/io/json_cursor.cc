#include "io/json_cursor.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

namespace kvreplay {

namespace {

using Problem = Unexpected<std::string>;

void append_utf8(std::string& out, std::uint32_t code) {
  if (code < 0x80) {
    out.push_back(static_cast<char>(code));
  } else if (code < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (code >> 6)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else if (code < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (code >> 12)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (code >> 18)));
    out.push_back(static_cast<char>(0x80 | ((code >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((code >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (code & 0x3F)));
  }
}

}  // namespace

bool JsonCursor::refill() {
  source_.advance_to(pos_);
  bool more = source_.refill();
  // Resynchronise even when nothing more came: the source has compacted its
  // buffer, so the old positions are stale (a second refill at the end of the
  // input would otherwise hand it a position past its data).
  pos_ = source_.begin();
  end_ = source_.end();
  return more && pos_ != end_;
}

int JsonCursor::peek() {
  for (;;) {
    // Newlines count once something follows them, so that a problem at the
    // end of the input names the last line with content, not the one after it.
    if (pos_ == end_ && !refill()) return -1;
    char c = *pos_;
    if (c == '\n') {
      ++pending_lines_;
    } else if (c != ' ' && c != '\t' && c != '\r') {
      line_ += pending_lines_;
      pending_lines_ = 0;
      return static_cast<unsigned char>(c);
    }
    ++pos_;
  }
}

int JsonCursor::peek_in_line() {
  for (;;) {
    if (pos_ == end_ && !refill()) return -1;
    char c = *pos_;
    if (c != ' ' && c != '\t' && c != '\r') return static_cast<unsigned char>(c);
    ++pos_;
  }
}

void JsonCursor::skip_byte_order_mark() {
  // The first refill holds the first 64 KiB (or all) of the input, so a BOM is
  // never split across reads here.
  if (pos_ == end_ && !refill()) return;
  if (end_ - pos_ >= 3 && static_cast<unsigned char>(pos_[0]) == 0xEF &&
      static_cast<unsigned char>(pos_[1]) == 0xBB && static_cast<unsigned char>(pos_[2]) == 0xBF) {
    pos_ += 3;
  }
}

std::string JsonCursor::describe_next() {
  int c = peek_in_line();
  if (c < 0) return "end of input";
  if (c == '\n') return "end of line";
  if (c >= 0x20 && c < 0x7F) return fmt::format("'{}'", static_cast<char>(c));
  return fmt::format("byte 0x{:02x}", c);
}

Result<void, std::string> JsonCursor::read_string(std::string& out) {
  out.clear();
  get();  // opening quote
  for (;;) {
    // Fast path: copy a run of plain ASCII bytes straight from the buffer.
    const char* run = pos_;
    while (pos_ != end_) {
      auto c = static_cast<unsigned char>(*pos_);
      if (c == '"' || c == '\\' || c < 0x20 || c >= 0x80) break;
      ++pos_;
    }
    out.append(run, static_cast<std::size_t>(pos_ - run));
    if (out.size() > limits_.max_string)
      return Problem{fmt::format("string longer than {} bytes", limits_.max_string)};
    int c = get();
    if (c < 0) return Problem{"unterminated string"};
    if (c == '"') return {};
    if (c < 0x20) return Problem{c == '\n' ? "unterminated string" : "control character in string"};
    if (c == '\\') {
      int e = get();
      switch (e) {
        case '"': out.push_back('"'); break;
        case '\\': out.push_back('\\'); break;
        case '/': out.push_back('/'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'u': {
          auto hex4 = [this]() -> int {
            int value = 0;
            for (int i = 0; i < 4; ++i) {
              int h = get();
              int digit = (h >= '0' && h <= '9')   ? h - '0'
                          : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                          : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                                   : -1;
              if (digit < 0) return -1;
              value = value * 16 + digit;
            }
            return value;
          };
          int code = hex4();
          if (code < 0) return Problem{"bad \\u escape in string"};
          if (code >= 0xD800 && code <= 0xDBFF) {
            if (get() != '\\' || get() != 'u') return Problem{"unpaired surrogate in string"};
            int low = hex4();
            if (low < 0xDC00 || low > 0xDFFF) return Problem{"unpaired surrogate in string"};
            code = 0x10000 + ((code - 0xD800) << 10) + (low - 0xDC00);
          } else if (code >= 0xDC00 && code <= 0xDFFF) {
            return Problem{"unpaired surrogate in string"};
          }
          append_utf8(out, static_cast<std::uint32_t>(code));
          break;
        }
        default: return Problem{"bad escape in string"};
      }
      continue;
    }
    if (c < 0x80) {  // plain byte read across a buffer refill
      out.push_back(static_cast<char>(c));
      continue;
    }
    // c >= 0x80: validate one UTF-8 sequence.
    int extra = 0;
    std::uint32_t code = 0;
    if ((c & 0xE0) == 0xC0) {
      extra = 1;
      code = static_cast<std::uint32_t>(c & 0x1F);
    } else if ((c & 0xF0) == 0xE0) {
      extra = 2;
      code = static_cast<std::uint32_t>(c & 0x0F);
    } else if ((c & 0xF8) == 0xF0) {
      extra = 3;
      code = static_cast<std::uint32_t>(c & 0x07);
    } else {
      return Problem{"invalid UTF-8 in string"};
    }
    for (int i = 0; i < extra; ++i) {
      int next = get();
      if (next < 0 || (next & 0xC0) != 0x80) return Problem{"invalid UTF-8 in string"};
      code = (code << 6) | static_cast<std::uint32_t>(next & 0x3F);
    }
    constexpr std::uint32_t kMin[] = {0, 0x80, 0x800, 0x10000};
    if (code < kMin[extra] || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) {
      return Problem{"invalid UTF-8 in string"};
    }
    append_utf8(out, code);
  }
}

Result<void, std::string> JsonCursor::read_number(std::string& out) {
  out.clear();
  auto take = [&](int c) {
    out.push_back(static_cast<char>(c));
    ++pos_;
  };
  auto peek_raw = [&]() -> int {
    if (pos_ == end_ && !refill()) return -1;
    return static_cast<unsigned char>(*pos_);
  };
  auto digits = [&]() -> int {
    int count = 0;
    for (int c = peek_raw(); c >= '0' && c <= '9'; c = peek_raw()) {
      if (out.size() >= kMaxNumber) return -1;
      take(c);
      ++count;
    }
    return count;
  };
  // The rest of a malformed number, for the message (bounded).
  auto rest = [&]() {
    for (int c = peek_raw();
         out.size() < kMaxNumber && c >= 0 &&
         ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+');
         c = peek_raw()) {
      take(c);
    }
    return out;
  };
  int c = peek_raw();
  if (c == '-') take(c);
  c = peek_raw();
  if (c == '0') {
    take(c);
    if (int d = peek_raw(); d >= '0' && d <= '9') {
      return Problem{fmt::format("number {} has a leading zero (JSON allows none)", rest())};
    }
  } else if (c >= '1' && c <= '9') {
    if (digits() < 0) return Problem{fmt::format("number longer than {} characters", kMaxNumber)};
  } else {
    return Problem{"expected a number"};
  }
  if (peek_raw() == '.') {
    take('.');
    int n = digits();
    if (n < 0) return Problem{fmt::format("number longer than {} characters", kMaxNumber)};
    if (n == 0) return Problem{"expected digits after '.'"};
  }
  c = peek_raw();
  if (c == 'e' || c == 'E') {
    take(c);
    c = peek_raw();
    if (c == '+' || c == '-') take(c);
    int n = digits();
    if (n < 0) return Problem{fmt::format("number longer than {} characters", kMaxNumber)};
    if (n == 0) return Problem{"expected digits in exponent"};
  }
  c = peek_raw();
  if ((c >= '0' && c <= '9') || c == '.' || c == 'e' || c == 'E' || c == '-' || c == '+') {
    // A number byte the grammar cannot take here ("1.5.3", "1e5e3", "1-2").
    if (c >= '0' && c <= '9')
      return Problem{fmt::format("number longer than {} characters", kMaxNumber)};
    return Problem{fmt::format("malformed number {}", rest())};
  }
  return {};
}

Result<void, std::string> JsonCursor::read_literal(std::string_view word) {
  for (char expected : word) {
    if (get() != expected) return Problem{fmt::format("invalid literal (expected '{}')", word)};
  }
  return {};
}

Result<void, std::string> JsonCursor::read_value(nlohmann::json& out, int depth) {
  std::size_t budget = limits_.max_value;
  return parse_value(&out, depth, budget);
}

Result<void, std::string> JsonCursor::skip_value(int depth) {
  std::size_t budget = 0;  // unused: nothing is kept
  return parse_value(nullptr, depth, budget);
}

Result<void, std::string> JsonCursor::parse_value(nlohmann::json* out, int depth,
                                                  std::size_t& budget) {
  if (depth >= kMaxDepth) return Problem{fmt::format("nested deeper than {} levels", kMaxDepth)};
  // What a kept value costs, roughly its size in memory; skipped values cost nothing.
  auto spend = [&](std::size_t bytes) {
    if (out == nullptr) return true;
    if (bytes > budget) return false;
    budget -= bytes;
    return true;
  };
  auto too_large = [this] {
    return Problem{fmt::format("value larger than {} bytes", limits_.max_value)};
  };
  int c = peek();
  std::string text;
  switch (c) {
    case '{': {
      skip();
      if (out != nullptr) *out = nlohmann::json::object();
      if (!spend(sizeof(nlohmann::json))) return too_large();
      if (peek() == '}') {
        skip();
        return {};
      }
      for (;;) {
        if (peek() != '"') return Problem{fmt::format("expected a key, got {}", describe_next())};
        std::string key;
        if (auto r = read_string(key); !r) return r;
        if (peek() != ':') return Problem{fmt::format("expected ':', got {}", describe_next())};
        skip();
        if (!spend(key.size())) return too_large();
        if (out != nullptr && out->contains(key))
          return Problem{fmt::format("duplicate key '{}'", key)};
        if (auto r = parse_value(out != nullptr ? &(*out)[key] : nullptr, depth + 1, budget); !r)
          return r;
        int next = peek();
        if (next < 0) return Problem{"unexpected end of input"};
        if (next != ',' && next != '}')
          return Problem{fmt::format("expected ',' or '}}' in object, got {}", describe_next())};
        skip();
        if (next == '}') return {};
      }
    }
    case '[': {
      skip();
      if (out != nullptr) *out = nlohmann::json::array();
      if (!spend(sizeof(nlohmann::json))) return too_large();
      if (peek() == ']') {
        skip();
        return {};
      }
      for (;;) {
        nlohmann::json element;
        if (auto r = parse_value(out != nullptr ? &element : nullptr, depth + 1, budget); !r)
          return r;
        if (out != nullptr) out->push_back(std::move(element));
        int next = peek();
        if (next < 0) return Problem{"unexpected end of input"};
        if (next != ',' && next != ']')
          return Problem{fmt::format("expected ',' or ']' in array, got {}", describe_next())};
        skip();
        if (next == ']') return {};
      }
    }
    case '"':
      if (auto r = read_string(text); !r) return r;
      if (!spend(sizeof(nlohmann::json) + text.size())) return too_large();
      if (out != nullptr) *out = text;
      return {};
    case 't':
      if (out != nullptr) *out = true;
      return read_literal("true");
    case 'f':
      if (out != nullptr) *out = false;
      return read_literal("false");
    case 'n':
      if (out != nullptr) *out = nullptr;
      return read_literal("null");
    case -1: return Problem{"unexpected end of input"};
    default:
      if (c == '-' || (c >= '0' && c <= '9')) {
        if (auto r = read_number(text); !r) return r;
        if (out == nullptr) return {};
        if (!spend(sizeof(nlohmann::json))) return too_large();
        try {
          *out = nlohmann::json::parse(text);  // grammar already checked
        } catch (const nlohmann::json::exception&) {
          return Problem{fmt::format("number {} is out of range", text)};
        }
        return {};
      }
      return Problem{fmt::format("unexpected {}", describe_next())};
  }
}

}  // namespace kvreplay

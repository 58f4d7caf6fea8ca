#include "formats/kvtrace_reader.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

#include "formats/requests/format_entry.h"
#include "io/field_set.h"
#include "io/json_object.h"

namespace kvreplay {

namespace {

constexpr std::uint64_t kMaxCount = 0xFFFFFFFFull;
constexpr std::size_t kMaxBatch = 1u << 20;

struct OpInfo {
  std::string_view name;
  Op op;
  std::uint32_t required;  // FieldBit mask
  std::uint32_t allowed;
};

enum FieldBit : std::uint32_t {
  kFieldOp = 1u << 0,
  kFieldT = 1u << 1,
  kFieldSeq = 1u << 2,
  kFieldChild = 1u << 3,
  kFieldPrompt = 1u << 4,
  kFieldTokens = 1u << 5,
  kFieldId = 1u << 6,
  kFieldPrefix = 1u << 7,
  kFieldSeqs = 1u << 8,
  kFieldPage = 1u << 9,
  kFieldBlock = 1u << 10,
  kFieldTier = 1u << 11,
  kFieldKey = 1u << 12,
  kFieldHits = 1u << 13,
};

constexpr std::array<OpInfo, 13> kOps{{
    {"prefix", Op::kPrefix, kFieldId | kFieldTokens, kFieldId | kFieldTokens},
    {"drop_prefix", Op::kDropPrefix, kFieldId, kFieldId},
    {"admit", Op::kAdmit, kFieldSeq | kFieldPrompt,
     kFieldSeq | kFieldPrompt | kFieldPrefix | kFieldHits},
    {"append", Op::kAppend, kFieldSeq | kFieldTokens, kFieldSeq | kFieldTokens},
    {"decode", Op::kDecode, kFieldSeqs, kFieldSeqs | kFieldTokens},
    {"fork", Op::kFork, kFieldSeq | kFieldChild, kFieldSeq | kFieldChild},
    {"free", Op::kFree, kFieldSeq, kFieldSeq},
    {"check", Op::kCheck, 0, 0},
    {"cache", Op::kCache, kFieldSeq | kFieldPage | kFieldBlock,
     kFieldSeq | kFieldPage | kFieldBlock},
    {"uncache", Op::kUncache, kFieldBlock, kFieldBlock},
    {"store", Op::kStore, kFieldSeq | kFieldPage | kFieldTier | kFieldKey,
     kFieldSeq | kFieldPage | kFieldTier | kFieldKey},
    {"load", Op::kLoad, kFieldTier | kFieldKey | kFieldBlock, kFieldTier | kFieldKey | kFieldBlock},
    {"drop", Op::kDrop, kFieldTier | kFieldKey, kFieldTier | kFieldKey},
}};

constexpr std::array<std::string_view, 14> kFieldNames{
    "op",     "t",    "seq",  "child", "prompt", "tokens", "id",
    "prefix", "seqs", "page", "block", "tier",   "key",    "hits"};

constexpr std::array<std::string_view, kTraceTiers> kTierNames{"cpu", "disk", "link"};

std::uint32_t field_bit(std::string_view key) {
  return kvreplay::field_bit(kFieldNames, key);
}

std::string fields_of(std::uint32_t mask) {
  std::string out = field_list(kFieldNames, mask);
  return out.empty() ? "no fields" : out;
}

std::string request_trace_problem(std::string_view format) {
  return format.empty()
             ? std::string("this is a request trace: use kvreplay simulate")
             : fmt::format("this is a request trace ({}): use kvreplay simulate", format);
}

}  // namespace

std::string_view trace_tier_name(std::uint8_t tier) {
  return tier < kTierNames.size() ? kTierNames[tier] : "?";
}

std::string_view to_string(Op op) {
  for (const OpInfo& info : kOps) {
    if (info.op == op) return info.name;
  }
  return "?";
}

KvTraceReader::KvTraceReader(std::unique_ptr<ByteSource> source, std::string name)
    : source_(std::move(source)), cursor_(*source_), name_(std::move(name)) {}

InputResult<std::unique_ptr<KvTraceReader>> KvTraceReader::open(const std::string& path) {
  std::string name = path == "-" ? "<stdin>" : path;
  auto source = ByteSource::open(path);
  if (!source) return Unexpected{InputError{name, 0, "file", "cannot open: " + source.error()}};
  std::unique_ptr<KvTraceReader> reader(new KvTraceReader(std::move(source).value(), name));
  if (auto status = reader->read_header(); !status) return Unexpected{status.error()};
  return reader;
}

InputResult<std::unique_ptr<KvTraceReader>> KvTraceReader::from_string(std::string data,
                                                                       const std::string& name) {
  std::unique_ptr<KvTraceReader> reader(
      new KvTraceReader(ByteSource::from_string(std::move(data)), name));
  if (auto status = reader->read_header(); !status) return Unexpected{status.error()};
  return reader;
}

InputResult<std::string> KvTraceReader::content_sha256() {
  auto digest = source_->content_sha256();
  if (!digest) return Unexpected{error_at(0, "file", digest.error())};
  return std::move(digest).value();
}

std::string_view KvTraceReader::format_name() const {
  return form_ == Form::kJsonLines ? "kvtrace-jsonl" : "kvtrace-json";
}

InputError KvTraceReader::error(std::string_view field, std::string problem) const {
  return error_at(cursor_.line(), field, std::move(problem));
}

InputError KvTraceReader::error_at(std::uint64_t line, std::string_view field,
                                   std::string problem) const {
  return InputError{name_, line, std::string(field), std::move(problem)};
}

InputError KvTraceReader::cursor_error(std::string_view field, const std::string& problem) const {
  if (!cursor_.source_error().empty()) return error("file", cursor_.source_error());
  return error(field, problem);
}

InputStatus KvTraceReader::read_header() {
  cursor_.skip_byte_order_mark();  // as editors on Windows write; RFC 8259 lets parsers skip it
  int c = cursor_.peek();
  if (c < 0) {
    if (!cursor_.source_error().empty()) return Unexpected{error("file", cursor_.source_error())};
    return Unexpected{error("json", "empty input: a kvtrace starts with {\"kvtrace\": 1, ...}")};
  }
  if (c == 0xFE || c == 0xFF) {
    return Unexpected{error("json", "the input looks like UTF-16 or UTF-32; a kvtrace is UTF-8")};
  }
  if (c != '{') {
    // The buffer still holds the input from its first byte: a CSV header on
    // its first line that is not blank is a request trace's.
    std::string_view start(source_->begin(),
                           static_cast<std::size_t>(source_->end() - source_->begin()));
    start.remove_prefix(std::min(start.size(), start.find_first_not_of("\xEF\xBB\xBF \t\r\n")));
    if (auto format = requests::csv_format_of_header(start.substr(0, start.find('\n')))) {
      return Unexpected{error("kvtrace", request_trace_problem(*format))};
    }
    return Unexpected{
        error("json", fmt::format("a kvtrace starts with {{\"kvtrace\": 1, ...}}, not {}",
                                  cursor_.describe_next()))};
  }
  cursor_.skip();
  bool saw_config = false;
  bool first = true;
  for (;;) {
    int next = cursor_.peek();
    if (next == '}' && first) {
      cursor_.skip();
      break;
    }
    if (next != '"')
      return Unexpected{
          cursor_error("json", fmt::format("expected a key, got {}", cursor_.describe_next()))};
    if (auto r = cursor_.read_string(key_); !r) return Unexpected{cursor_error("json", r.error())};
    if (cursor_.peek() != ':') {
      return Unexpected{
          cursor_error(key_, fmt::format("expected ':', got {}", cursor_.describe_next()))};
    }
    cursor_.skip();
    bool first_key = first;
    first = false;
    if (key_ == "kvtrace") {
      if (saw_version_) return Unexpected{error(key_, "duplicate key")};
      nlohmann::json version;
      if (auto r = cursor_.read_value(version); !r)
        return Unexpected{cursor_error("kvtrace", r.error())};
      if (!version.is_number_integer()) {
        return Unexpected{
            error("kvtrace", fmt::format("expected the integer 1, got {}", version.dump()))};
      }
      if (version.get<std::int64_t>() != 1) {
        return Unexpected{error(
            "kvtrace",
            fmt::format("unsupported version {} (this kvreplay reads version 1)", version.dump()))};
      }
      header_.version = 1;
      saw_version_ = true;
    } else if (key_ == "config") {
      if (saw_config) return Unexpected{error(key_, "duplicate key")};
      header_.config_line = cursor_.line();
      if (cursor_.peek() != '{') {
        return Unexpected{
            error("config", fmt::format("expected an object, got {}", describe_value(cursor_)))};
      }
      if (auto r = cursor_.read_value(header_.config); !r)
        return Unexpected{cursor_error("config", r.error())};
      saw_config = true;
    } else if (key_ == "meta") {
      if (saw_meta_) return Unexpected{error(key_, "duplicate key")};
      if (auto r = cursor_.skip_value(); !r) return Unexpected{cursor_error("meta", r.error())};
      saw_meta_ = true;
    } else if (key_ == "events") {
      if (!saw_config) {
        return Unexpected{error("config",
                                "missing before \"events\" (a single-document trace must "
                                "give config before its events)")};
      }
      if (cursor_.peek() != '[') {
        return Unexpected{
            error("events", fmt::format("expected an array, got {}", describe_value(cursor_)))};
      }
      cursor_.skip();
      form_ = Form::kDocument;
      if (cursor_.peek() == ']') {
        cursor_.skip();
        return read_document_tail();
      }
      return {};
    } else if (key_ == "op" && first_key) {
      return Unexpected{error("kvtrace",
                              "missing: the trace starts with an event, not the header "
                              "{\"kvtrace\": 1, \"config\": {...}}")};
    } else if (auto format = requests::json_format_of_key(key_); format && first_key) {
      // A request record: its keys (id and hash_ids are in both formats) say which.
      const std::uint64_t line = cursor_.line();
      while (format->empty() && cursor_.skip_value() && cursor_.peek() == ',') {
        cursor_.skip();
        if (cursor_.peek() != '"' || !cursor_.read_string(key_) || cursor_.peek() != ':') break;
        cursor_.skip();
        auto also = requests::json_format_of_key(key_);
        if (!also) break;
        format = also;
      }
      return Unexpected{error_at(line, "kvtrace", request_trace_problem(*format))};
    } else {
      return Unexpected{error(key_, "unknown header key (expected kvtrace, config, meta, events)")};
    }
    int sep = cursor_.peek();
    if (sep == ',') {
      cursor_.skip();
      continue;
    }
    if (sep == '}') {
      cursor_.skip();
      break;
    }
    return Unexpected{cursor_error("json", fmt::format("expected ',' or '}}' in the header, got {}",
                                                       cursor_.describe_next()))};
  }
  // JSON Lines: the header ends its line.
  form_ = Form::kJsonLines;
  if (!saw_version_)
    return Unexpected{error("kvtrace", "missing (the header must say \"kvtrace\": 1)")};
  if (!saw_config) return Unexpected{error("config", "missing from the header")};
  int after = cursor_.peek_in_line();
  if (after >= 0 && after != '\n') {
    return Unexpected{error("json", fmt::format("expected end of line after the header, got {}",
                                                cursor_.describe_next()))};
  }
  return {};
}

InputStatus KvTraceReader::read_document_tail() {
  // After the events array: more header keys, then the closing brace, then nothing.
  for (;;) {
    int sep = cursor_.peek();
    if (sep == '}') {
      cursor_.skip();
      break;
    }
    if (sep != ',') {
      return Unexpected{cursor_error(
          "json",
          fmt::format("expected ',' or '}}' after the events, got {}", cursor_.describe_next()))};
    }
    cursor_.skip();
    if (cursor_.peek() != '"')
      return Unexpected{
          cursor_error("json", fmt::format("expected a key, got {}", cursor_.describe_next()))};
    if (auto r = cursor_.read_string(key_); !r) return Unexpected{cursor_error("json", r.error())};
    if (cursor_.peek() != ':') return Unexpected{cursor_error(key_, "expected ':'")};
    cursor_.skip();
    if (key_ == "kvtrace" && !saw_version_) {
      nlohmann::json version;
      if (auto r = cursor_.read_value(version); !r)
        return Unexpected{cursor_error("kvtrace", r.error())};
      if (!version.is_number_integer() || version.get<std::int64_t>() != 1) {
        return Unexpected{error(
            "kvtrace",
            fmt::format("unsupported version {} (this kvreplay reads version 1)", version.dump()))};
      }
      saw_version_ = true;
    } else if (key_ == "meta" && !saw_meta_) {
      if (auto r = cursor_.skip_value(); !r) return Unexpected{cursor_error("meta", r.error())};
      saw_meta_ = true;
    } else {
      return Unexpected{
          error(key_, key_ == "kvtrace" || key_ == "config" || key_ == "events" || key_ == "meta"
                          ? "duplicate key"
                          : "unknown header key (expected kvtrace, config, meta, events)")};
    }
  }
  if (!saw_version_)
    return Unexpected{error("kvtrace", "missing (the trace must say \"kvtrace\": 1)")};
  if (int rest = cursor_.peek(); rest >= 0) {
    return Unexpected{error(
        "json", fmt::format("unexpected {} after the trace document", cursor_.describe_next()))};
  }
  if (!cursor_.source_error().empty()) return Unexpected{error("file", cursor_.source_error())};
  done_ = true;
  return {};
}

InputResult<bool> KvTraceReader::next(Event& event) {
  if (done_) return false;
  if (form_ == Form::kJsonLines) {
    int c = cursor_.peek();
    if (c < 0) {
      if (!cursor_.source_error().empty()) return Unexpected{error("file", cursor_.source_error())};
      done_ = true;
      return false;
    }
    if (auto status = read_event(event); !status) return Unexpected{status.error()};
    if (cursor_.line() != event.line) {
      return Unexpected{error_at(event.line, "json",
                                 fmt::format("the event continues on line {} (JSON Lines: one "
                                             "event per line)",
                                             cursor_.line()))};
    }
    int after = cursor_.peek_in_line();
    if (after >= 0 && after != '\n') {
      return Unexpected{error("json", fmt::format("expected end of line after the event, got {}",
                                                  cursor_.describe_next()))};
    }
    return true;
  }
  // Document form: we are inside the events array, before an element.
  if (auto status = read_event(event); !status) return Unexpected{status.error()};
  int sep = cursor_.peek();
  if (sep == ',') {
    cursor_.skip();
    if (cursor_.peek() == ']') return Unexpected{error("json", "trailing ',' in the events array")};
  } else if (sep == ']') {
    cursor_.skip();
    if (auto status = read_document_tail(); !status) return Unexpected{status.error()};
  } else {
    return Unexpected{cursor_error("json", fmt::format("expected ',' or ']' after an event, got {}",
                                                       cursor_.describe_next()))};
  }
  return true;
}

InputResult<std::uint64_t> KvTraceReader::read_uint(std::string_view field, std::uint64_t min,
                                                    std::uint64_t max) {
  auto value = read_json_uint(cursor_, scalar_, min, max, BelowMin::kPlain);
  if (value) return value.value();
  const JsonMembers::Problem& problem = value.error();
  return Unexpected{problem.at_cursor ? cursor_error(field, problem.message)
                                      : error(field, problem.message)};
}

InputStatus KvTraceReader::read_ids(std::vector<std::uint64_t>& out, bool non_empty) {
  const std::string field = key_;
  if (cursor_.peek() != '[') {
    return Unexpected{
        error(field, fmt::format("expected an array, got {}", describe_value(cursor_)))};
  }
  cursor_.skip();
  if (cursor_.peek() == ']') {
    if (non_empty) return Unexpected{error(field, "must not be empty")};
    cursor_.skip();
    return {};
  }
  for (;;) {
    auto value = read_uint(field, 0, std::numeric_limits<std::int64_t>::max());
    if (!value) return Unexpected{value.error()};
    if (out.size() >= kMaxBatch) {
      return Unexpected{error(field, fmt::format("more than {} entries", kMaxBatch))};
    }
    out.push_back(value.value());
    int sep = cursor_.peek();
    if (sep < 0) return Unexpected{cursor_error(field, "unexpected end of input")};
    if (sep != ',' && sep != ']') {
      return Unexpected{
          error(field, fmt::format("expected ',' or ']', got {}", cursor_.describe_next()))};
    }
    cursor_.skip();
    if (sep == ']') return {};
  }
}

InputStatus KvTraceReader::read_tier(Event& event) {
  if (cursor_.peek() != '"') {
    return Unexpected{
        error("tier", fmt::format("expected a string, got {}", describe_value(cursor_)))};
  }
  if (auto r = cursor_.read_string(scalar_); !r) return Unexpected{cursor_error("tier", r.error())};
  auto named = std::find(kTierNames.begin(), kTierNames.end(), scalar_);
  if (named == kTierNames.end()) {
    return Unexpected{
        error("tier", fmt::format("unknown tier '{}' (expected cpu, disk or link)", scalar_))};
  }
  event.tier = static_cast<std::uint8_t>(named - kTierNames.begin());
  return {};
}

InputStatus KvTraceReader::read_event(Event& event) {
  const std::uint64_t line = cursor_.line();
  if (cursor_.peek() != '{') {
    return Unexpected{cursor_error(
        "json", fmt::format("expected an event object, got {}", cursor_.describe_next()))};
  }
  cursor_.skip();
  event.index = ++events_read_;
  event.line = line;
  event.has_t = false;
  event.has_prefix = false;
  event.tokens = 1;
  event.seqs.clear();
  event.hits.clear();
  std::uint32_t seen = 0;
  const OpInfo* info = nullptr;
  JsonMembers members(cursor_, key_, "an event", "the event");
  while (members.next()) {
    std::uint32_t bit = field_bit(key_);
    if (bit == 0) return Unexpected{error(key_, "unknown field")};
    if (seen & bit) return Unexpected{error(key_, "duplicate field")};
    seen |= bit;
    switch (bit) {
      case kFieldOp: {
        if (cursor_.peek() != '"') {
          return Unexpected{
              error("op", fmt::format("expected a string, got {}", describe_value(cursor_)))};
        }
        if (auto r = cursor_.read_string(scalar_); !r)
          return Unexpected{cursor_error("op", r.error())};
        for (const OpInfo& candidate : kOps) {
          if (candidate.name == scalar_) info = &candidate;
        }
        if (info == nullptr) {
          return Unexpected{
              error("op", fmt::format("unknown op '{}' (expected prefix, drop_prefix, "
                                      "admit, append, decode, fork, free, check, cache, "
                                      "uncache, store, load, drop)",
                                      scalar_))};
        }
        break;
      }
      case kFieldT: {
        int c = cursor_.peek();
        if (c != '-' && (c < '0' || c > '9')) {
          return Unexpected{
              error("t", fmt::format("expected a number, got {}", describe_value(cursor_)))};
        }
        if (auto r = cursor_.read_number(scalar_); !r)
          return Unexpected{cursor_error("t", r.error())};
        double t = 0.0;
        auto [ptr, ec] = std::from_chars(scalar_.data(), scalar_.data() + scalar_.size(), t);
        if (ec != std::errc{} || !std::isfinite(t)) {
          return Unexpected{error("t", fmt::format("{} is out of range", scalar_))};
        }
        event.has_t = true;
        event.t = t;
        break;
      }
      case kFieldSeq:
      case kFieldChild: {
        auto value = read_uint(key_, 0, std::numeric_limits<std::int64_t>::max());
        if (!value) return Unexpected{value.error()};
        (bit == kFieldSeq ? event.seq : event.child) = value.value();
        break;
      }
      case kFieldPrompt:
      case kFieldTokens: {
        auto value = read_uint(key_, bit == kFieldPrompt ? 0 : 1, kMaxCount);
        if (!value) return Unexpected{value.error()};
        (bit == kFieldPrompt ? event.prompt : event.tokens) =
            static_cast<std::uint32_t>(value.value());
        break;
      }
      case kFieldId:
      case kFieldPrefix: {
        if (cursor_.peek() != '"') {
          return Unexpected{
              error(key_, fmt::format("expected a string, got {}", describe_value(cursor_)))};
        }
        if (auto r = cursor_.read_string(event.id); !r)
          return Unexpected{cursor_error(key_, r.error())};
        if (event.id.empty()) return Unexpected{error(key_, "must not be empty")};
        event.has_prefix = bit == kFieldPrefix;
        break;
      }
      case kFieldSeqs:
      case kFieldHits: {
        auto& out = bit == kFieldSeqs ? event.seqs : event.hits;
        if (auto status = read_ids(out, bit == kFieldSeqs); !status) return status;
        break;
      }
      case kFieldPage: {
        auto value = read_uint(key_, 0, kMaxCount);
        if (!value) return Unexpected{value.error()};
        event.page = static_cast<std::uint32_t>(value.value());
        break;
      }
      case kFieldBlock:
      case kFieldKey: {
        auto value = read_uint(key_, 0, std::numeric_limits<std::int64_t>::max());
        if (!value) return Unexpected{value.error()};
        (bit == kFieldBlock ? event.block : event.key) = value.value();
        break;
      }
      case kFieldTier: {
        if (auto status = read_tier(event); !status) return status;
        break;
      }
      default: break;
    }
  }
  if (members.failed()) {
    const JsonMembers::Problem& problem = members.problem();
    return Unexpected{problem.at_cursor ? cursor_error(problem.field, problem.message)
                                        : error(problem.field, problem.message)};
  }
  if (info == nullptr) return Unexpected{error_at(line, "op", "missing")};
  event.op = info->op;
  if (std::uint32_t extra = seen & ~(info->allowed | kFieldOp | kFieldT)) {
    return Unexpected{error_at(
        line, std::string(first_field(kFieldNames, extra)),
        fmt::format("not a field of {} (it takes {})", info->name, fields_of(info->allowed)))};
  }
  if (std::uint32_t missing = info->required & ~seen) {
    return Unexpected{
        error_at(line, std::string(first_field(kFieldNames, missing)),
                 fmt::format("missing ({} needs {})", info->name, fields_of(info->required)))};
  }
  if ((seen & kFieldHits) && (seen & kFieldPrefix)) {
    return Unexpected{error_at(line, "hits", "an admit takes a prefix or hits, not both")};
  }
  if (event.has_t) {
    if (has_last_t_ && event.t < last_t_) {
      return Unexpected{error_at(
          line, "t", fmt::format("{} goes backwards (previous t was {})", event.t, last_t_))};
    }
    has_last_t_ = true;
    last_t_ = event.t;
  }
  return {};
}

}  // namespace kvreplay

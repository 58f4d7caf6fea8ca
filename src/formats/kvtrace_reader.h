// KvTraceReader: streams a kvtrace v1 event trace (SPEC section 2.1).
//
// Grammar (told apart by content, not by file name; gzip recognised by content):
//   JSON Lines:  {"kvtrace": 1, "config": {...}}          <- line 1, the header
//                {"op": "admit", "seq": 0, "prompt": 40}  <- one event per line
//                ...                                        (blank lines allowed)
//   Document:    {"kvtrace": 1, "config": {...}, "events": [{...}, ...]}
//                "config" must come before "events" (the events are streamed);
//                "kvtrace" may come anywhere.
// A UTF-8 byte order mark at the start is skipped; UTF-16/32 is refused.
// The header may also carry "meta" (any value, ignored); every header key may
// appear once. Events:
//   prefix      id (string), tokens (int >= 1)
//   drop_prefix id
//   admit       seq (int >= 0), prompt (int >= 0), prefix (id, optional)
//   append      seq, tokens (int >= 1)
//   decode      seqs (non-empty array of ints >= 0), tokens (int >= 1, default 1)
//   fork        seq, child
//   free        seq
//   check       -
//   cache       seq, page (int >= 0), block (int >= 0): the prefix cache holds
//               the page under the name `block`
//   uncache     block
//   store       seq, page, tier ("cpu", "disk" or "link"), key (int >= 0):
//               the tier keeps a copy of the page's bytes under `key` ("link":
//               KV in flight from a prefill instance to a decode instance)
//   load        tier, key, block: a fresh page takes the tier's copy and the
//               prefix cache holds it under the name `block`
//   drop        tier, key
// admit may carry hits (array of cached block names; not with prefix).
// Every event may carry "t" (seconds, never smaller than the previous t).
// Unknown fields, fields that do not belong to the op, duplicate fields and
// counts outside [1, 2^32-1] are errors. Memory is bounded per event: strings are
// capped at 4096 bytes, nesting at 64 levels and a decode's seqs at 2^20 entries.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "io/byte_source.h"
#include "io/input_error.h"
#include "io/json_cursor.h"

namespace kvreplay {

enum class Op : std::uint8_t {
  kPrefix,
  kDropPrefix,
  kAdmit,
  kAppend,
  kDecode,
  kFork,
  kFree,
  kCheck,
  kCache,
  kUncache,
  kStore,
  kLoad,
  kDrop
};

// The tiers a kvtrace names (store, load, drop): the offload tiers, and the
// link between a disaggregated fleet's prefill and decode instances (KV
// staged as copies by the prefill side, loaded by the decode side).
inline constexpr std::size_t kTraceTiers = 3;
inline constexpr std::uint8_t kLinkTier = 2;
std::string_view trace_tier_name(std::uint8_t tier);  // "cpu", "disk", "link"

std::string_view to_string(Op op);

struct Event {
  Op op = Op::kCheck;
  std::uint64_t index = 0;  // 1-based position in the trace
  std::uint64_t line = 0;   // line where the event starts
  bool has_t = false;
  double t = 0.0;
  std::uint64_t seq = 0;            // admit, append, fork (parent), free
  std::uint64_t child = 0;          // fork
  std::uint32_t prompt = 0;         // admit: total prompt tokens, prefix included
  std::uint32_t tokens = 1;         // prefix, append, decode
  bool has_prefix = false;          // admit
  std::string id;                   // prefix, drop_prefix: the prefix id; admit: its prefix
  std::vector<std::uint64_t> seqs;  // decode
  std::uint32_t page = 0;           // cache, store: the page of seq
  std::uint64_t block = 0;          // cache, uncache, load: the cached block's name
  std::uint8_t tier = 0;            // store, load, drop: 0 cpu, 1 disk
  std::uint64_t key = 0;            // store, load, drop: the tier's name of the copy
  std::vector<std::uint64_t> hits;  // admit: cached block names of its first pages
};

struct TraceHeader {
  int version = 0;
  nlohmann::json config = nlohmann::json::object();
  std::uint64_t config_line = 1;
};

class KvTraceReader {
 public:
  enum class Form : std::uint8_t { kJsonLines, kDocument };

  // Opens and reads the header. `name` is how messages name the file.
  static InputResult<std::unique_ptr<KvTraceReader>> open(const std::string& path);
  static InputResult<std::unique_ptr<KvTraceReader>> from_string(std::string data,
                                                                 const std::string& name);

  const TraceHeader& header() const { return header_; }
  Form form() const { return form_; }
  std::string_view format_name() const;
  const std::string& name() const { return name_; }

  // Reads the next event into `event`. Returns false at the end of the trace.
  InputResult<bool> next(Event& event);

  // SHA-256 (hex) of the whole trace's bytes, decompressed (ByteSource::content_sha256):
  // reads and hashes whatever next() has not consumed. Call it once, after the
  // last next(); the reader cannot be used afterwards.
  InputResult<std::string> content_sha256();

 private:
  KvTraceReader(std::unique_ptr<ByteSource> source, std::string name);
  InputStatus read_header();
  InputStatus read_event(Event& event);
  // An array of ids (seqs, hits) into `out`; `non_empty`: [] is an error.
  InputStatus read_ids(std::vector<std::uint64_t>& out, bool non_empty);
  // A tier name ("cpu", "disk") into event.tier.
  InputStatus read_tier(Event& event);
  InputStatus read_document_tail();
  InputError error(std::string_view field, std::string problem) const;
  InputError error_at(std::uint64_t line, std::string_view field, std::string problem) const;
  // Wraps a cursor problem, preferring the source's own error (e.g. truncated gzip).
  InputError cursor_error(std::string_view field, const std::string& problem) const;
  InputResult<std::uint64_t> read_uint(std::string_view field, std::uint64_t min,
                                       std::uint64_t max);

  std::unique_ptr<ByteSource> source_;
  JsonCursor cursor_;
  std::string name_;
  Form form_ = Form::kJsonLines;
  TraceHeader header_;
  bool saw_version_ = false;
  bool saw_meta_ = false;
  bool done_ = false;
  std::uint64_t events_read_ = 0;
  bool has_last_t_ = false;
  double last_t_ = 0.0;
  std::string key_;     // scratch
  std::string scalar_;  // scratch
};

}  // namespace kvreplay

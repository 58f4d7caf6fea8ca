// RequestReader: streams a request trace (SPEC 2.2) in any supported format.
//
// Formats are told apart by content, never by file name (gzip is recognised by
// content too; "-" reads standard input), or forced by the caller:
//   - first non-blank byte '{'  -> JSON Lines: native or Mooncake, decided by the
//     first record's keys (Mooncake has timestamp / input_length / output_length;
//     native has arrival / prompt / output / n / prefix / prefix_tokens /
//     hash_block_tokens / id). A record with keys of both is an error.
//   - anything else             -> CSV: the header line names the columns; Azure has
//     TIMESTAMP, ContextTokens, GeneratedTokens; BurstGPT has Timestamp,
//     Request tokens, Response tokens. Column names match case-insensitively and
//     in any order; extra columns are ignored.
// A UTF-8 byte-order mark and blank lines before the first record are skipped. An
// input with no record at all (empty or blank) is an error; a CSV with a header
// and no rows has zero requests.
//
// native JSON Lines (one record a line; blank lines allowed):
//   arrival            number >= 0, seconds (required)
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
//   hash_block_tokens  int >= 1, default 512; a kvreplay extension (Mooncake's
//                      blocks are 512 tokens); only with hash_ids
//   Strict: unknown and duplicate fields are errors.
// Mooncake JSON Lines (FAST'25 traces):
//   timestamp ms (int >= 0, arrival = timestamp / 1000 s), input_length (int >= 1),
//   output_length (int >= 1), hash_ids (required; exactly ceil(input_length / 512)
//   ints >= 0; hash_block_tokens = 512). Tolerant: unknown fields are skipped
//   (published traces may grow keys); duplicate known fields are errors.
// Azure LLM inference CSV (2023/2024 traces):
//   TIMESTAMP "YYYY-MM-DD HH:MM:SS[.fraction]" (a 'T' separator, up to 9 fraction
//   digits and a "Z" or "+HH:MM" / "-HH:MM" suffix are accepted), read exactly as
//   integer nanoseconds with no locale or time-zone lookup; arrival = seconds since
//   the first row. ContextTokens -> prompt (int >= 1), GeneratedTokens -> output
//   (int >= 1).
// BurstGPT CSV:
//   Timestamp seconds from the trace start (number >= 0) -> arrival; Request tokens
//   -> prompt (int >= 1); Response tokens -> output. Rows with 0 Response tokens are
//   failed requests: skipped and counted in skipped(). Model, Total tokens and
//   Log Type are not used.
// Every format: arrivals never go backwards (an error naming the time field).
// Azure/BurstGPT/Mooncake ids are the record's line number.
// CSV: RFC 4180 quoting ("" inside a quoted field; quoted fields may span lines),
// LF or CRLF line endings, spaces around unquoted values are ignored, every row
// has as many fields as the header, numbers are plain decimal integers.
//
// Bad input is an InputError "FILE:LINE: FIELD: problem" naming the field as the
// format spells it (e.g. "input_length", "ContextTokens"); syntax problems name
// "json" or "csv". Memory stays bounded per record: strings and CSV fields are
// capped at 4096 bytes, nesting at 64 levels, hash_ids at 2^20 entries, CSV rows at
// 256 fields.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "sim/request.h"
#include "trace/input_error.h"

namespace kvreplay {

class RequestReader {
 public:
  static constexpr std::size_t kMaxHashIds = std::size_t{1} << 20;
  static constexpr std::size_t kMaxField = 4096;
  static constexpr std::size_t kMaxColumns = 256;

  // Opens `path` ("-" for standard input) and recognises its format (or checks
  // the forced one as far as the header goes).
  static InputResult<std::unique_ptr<RequestReader>> open(const std::string& path,
                                                          std::optional<RequestFormat> forced);
  // An in-memory trace (tests, fuzzers); `name` is how messages name it.
  static InputResult<std::unique_ptr<RequestReader>> from_string(
      std::string data, const std::string& name, std::optional<RequestFormat> forced);

  ~RequestReader();
  RequestReader(const RequestReader&) = delete;
  RequestReader& operator=(const RequestReader&) = delete;

  // The format. JSON Lines without a forced format are told apart by the first
  // record's keys, so open() reads (and checks) the first record already.
  RequestFormat format() const;
  const std::string& name() const;

  // Reads the next request into `out`. Returns false at the end of the trace.
  InputResult<bool> next(Request& out);

  // Records read but not returned (BurstGPT failed requests).
  std::uint64_t skipped() const;

  // SHA-256 (hex) of the whole trace's bytes, decompressed (ByteSource::content_sha256):
  // reads and hashes whatever next() has not consumed. Call it once, after the
  // last next(); the reader cannot be used afterwards.
  InputResult<std::string> content_sha256();

 private:
  struct Impl;
  explicit RequestReader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvreplay

// RequestReader: streams a request trace (SPEC 2.2) in any supported format.
//
// Formats are told apart by content, never by file name (gzip is recognised by
// content too; "-" reads standard input), or forced by the caller; see
// requests/detect.h. Each format has its reader, with its grammar and an
// example at the top of its header:
//   native JSON Lines    requests/native_reader.h
//   Mooncake JSON Lines  requests/mooncake_reader.h   (both: requests/json_lines.h)
//   Azure CSV            requests/azure_reader.h
//   BurstGPT CSV         requests/burstgpt_reader.h   (both: requests/csv.h)
// Every format: arrivals never go backwards (an error naming the time field,
// which says how to sort the trace: kvreplay convert --sort), and never past
// kMaxArrivalSeconds (request.h).
// Azure/BurstGPT/Mooncake ids are the record's line number.
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

#include "formats/requests/request.h"
#include "io/input_error.h"

namespace kvreplay {

class RequestReader {
 public:
  static constexpr std::size_t kMaxHashIds = std::size_t{1} << 20;
  static constexpr std::size_t kMaxField = 4096;
  static constexpr std::size_t kMaxColumns = 256;

  // Opens `path` ("-" for standard input) and recognises its format (or checks
  // the forced one as far as the header goes). Messages name it `shown_as`
  // when given (a copy of standard input: "-"), else by its path.
  static InputResult<std::unique_ptr<RequestReader>> open(const std::string& path,
                                                          std::optional<RequestFormat> forced,
                                                          const std::string& shown_as = {});
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

  // Lets arrivals go backwards from here on, for a caller that sorts them
  // (convert --sort). Azure arrivals are then seconds from the first row,
  // negative for a row before it; start() names the earliest row.
  void allow_unsorted();
  // The wall-clock instant of arrival 0 as the trace writes it, when the format
  // has one: Azure's first (with allow_unsorted, earliest) TIMESTAMP, or a
  // native trace's "start". Complete once next() returned false.
  std::optional<std::string> start() const;

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

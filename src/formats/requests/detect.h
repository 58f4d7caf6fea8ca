// Telling request trace formats apart by content, never by file name:
//   - first non-blank byte '{'  -> JSON Lines: native or Mooncake, decided by the
//     first record's keys (Mooncake has timestamp / input_length / output_length;
//     native has arrival / prompt / output / n / prefix / prefix_tokens /
//     hash_block_tokens / id). A record with keys of both is an error, and so is
//     one that looks like a kvtrace event.
//   - anything else             -> CSV: the header line names the columns; Azure
//     has ContextTokens or GeneratedTokens, BurstGPT has Request tokens or
//     Response tokens (case-insensitive).
// A UTF-8 byte-order mark and blank lines before the first record are skipped;
// an input with no record at all is an error.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "formats/requests/format_reader.h"
#include "formats/requests/request.h"
#include "io/byte_source.h"

namespace kvreplay::requests {

struct Detected {
  RequestFormat format = RequestFormat::kNative;
  std::unique_ptr<FormatReader> reader;
};

// Recognises the format of `source` (or takes `forced`, checking it as far as
// the header goes) and returns its reader, positioned at the first request.
// JSON Lines without a forced format are told apart by the first record, so
// that record is read (and checked) here already. `source` and `name` must
// outlive the reader; messages name the file `name`.
InputResult<Detected> detect_format(ByteSource& source, const std::string& name,
                                    std::optional<RequestFormat> forced);

}  // namespace kvreplay::requests

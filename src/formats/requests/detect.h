// Telling request trace formats apart by content, never by file name, by the
// table of formats (format_table.cc; each format's rule in its reader's
// RequestFormatEntry, format_entry.h says how they are read):
//   - first non-blank byte '{'  -> JSON Lines: the first record's keys decide
//     (today native or Mooncake). A record with decisive keys of two formats is
//     an error, and so is one that looks like a kvtrace event.
//   - anything else             -> CSV: the header line names the columns (today
//     Azure or BurstGPT, case-insensitive).
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

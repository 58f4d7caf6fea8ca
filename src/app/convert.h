// The `convert` command: any request trace format (SPEC 2.2) -> native JSON
// Lines, written by formats/requests/native_writer.h.
#pragma once

#include <optional>
#include <string>

#include "formats/requests/request.h"

namespace kvreplay {

// Converts `input` ("-" = stdin) to native JSON Lines on `output` ("-" = stdout),
// an output of io/output.h: a file is written through a temporary file and a
// rename, so it appears only when the whole input converted; stdout, a device
// or a FIFO is written in place as records are read. Bad input: one
// "FILE:LINE: FIELD: problem" line on stderr, exit code 2, and no output file.
// An output that cannot be written: one "kvreplay: cannot write the output
// PATH: why" line, exit code 2. The trace's wall-clock start, when its format
// has one (RequestReader::start), is the first record's "start".
// `sort`: arrivals may go backwards; every request is held in memory (within
// core/memory_budget.h's limit, else exit 2) and written in arrival order,
// ties in trace order. Returns the exit code.
int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output, bool sort = false);

}  // namespace kvreplay

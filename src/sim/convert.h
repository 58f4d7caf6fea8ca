// The `convert` subcommand: any request trace format (SPEC 2.2) -> native JSON Lines.
//
// Output: one record a line, keys in a fixed order:
//   {"arrival": A, "id": ID, "prompt": P, "output": O[, "n": N][, "prefix": S,
//    "prefix_tokens": T][, "hash_block_tokens": B, "hash_ids": [...]]}
// arrival is printed with the fewest digits that read back as the same double;
// id is the record's id as compact JSON (the line number for formats without ids);
// n only when it is not 1. Converting the output again gives the same bytes.
#pragma once

#include <optional>
#include <string>

#include "sim/request.h"

namespace kvreplay {

// Appends `request` as one native JSON Lines record (newline included).
void append_native_json(std::string& out, const Request& request);

// Converts `input` ("-" = stdin) to native JSON Lines on `output` ("-" = stdout),
// an output of io/output.h: a file is written through a temporary file and a
// rename, so it appears only when the whole input converted; stdout, a device
// or a FIFO is written in place as records are read. Bad input: one
// "FILE:LINE: FIELD: problem" line on stderr, exit code 2, and no output file.
// An output that cannot be written: one "kvreplay: cannot write the output
// PATH: why" line, exit code 2. Returns the exit code.
int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output);

}  // namespace kvreplay

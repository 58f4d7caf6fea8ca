// Writing the native request format (SPEC 2.2), what `convert` prints.
//
// Output: one record a line, keys in a fixed order:
//   {"arrival": A[, "start": W], "id": ID, "prompt": P, "output": O[, "n": N][, "prefix": S,
//    "prefix_tokens": T][, "hash_block_tokens": B, "hash_ids": [...]]}
// arrival is printed with the fewest digits that read back as the same double;
// id is the record's id as compact JSON (the line number for formats without ids);
// n only when it is not 1; start (the trace's wall-clock start, the first record
// only) when given. Converting the output again gives the same bytes.
#pragma once

#include <string>
#include <string_view>

#include "formats/requests/request.h"

namespace kvreplay {

// Appends `request` as one native JSON Lines record (newline included), with
// "start": `start` when it is not empty.
void append_native_json(std::string& out, const Request& request, std::string_view start = {});

}  // namespace kvreplay

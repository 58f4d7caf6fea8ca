// FormatReader: what RequestReader asks of the reader of one request trace
// format (native_reader.h, mooncake_reader.h, azure_reader.h,
// burstgpt_reader.h); detect.h picks which.
#pragma once

#include <cstdint>

#include "formats/requests/request.h"
#include "io/input_error.h"

namespace kvreplay::requests {

class FormatReader {
 public:
  virtual ~FormatReader() = default;
  // Reads the next request into `out`. Returns false at the end of the trace.
  virtual InputResult<bool> next(Request& out) = 0;
  // Records read but not returned (BurstGPT's failed requests).
  virtual std::uint64_t skipped() const { return 0; }
};

}  // namespace kvreplay::requests

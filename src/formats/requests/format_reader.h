// FormatReader: what RequestReader asks of the reader of one request trace
// format (native_reader.h, mooncake_reader.h, azure_reader.h,
// burstgpt_reader.h); detect.h picks which.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

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
  // The wall-clock instant of arrival 0 as the trace writes it, for the formats
  // that have one (Azure: the earliest TIMESTAMP; native: "start").
  virtual std::optional<std::string> start() const { return std::nullopt; }

  // From now on arrivals may go backwards (RequestReader::allow_unsorted).
  void allow_unsorted() { unsorted_ok_ = true; }

 protected:
  bool unsorted_ok() const { return unsorted_ok_; }

 private:
  bool unsorted_ok_ = false;
};

// What follows "goes backwards (...)" in every reader's message: how to sort
// the trace `name` (as messages name it; "<stdin>" is standard input).
std::string sort_hint(std::string_view name);

}  // namespace kvreplay::requests

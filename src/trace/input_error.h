// InputError: bad input, reported as "FILE:LINE: FIELD: problem" and exit code 2.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "core/result.h"

namespace kvreplay {

struct InputError {
  std::string file;
  std::uint64_t line = 0;  // 0 when the problem is not tied to a line
  std::string field;       // the field at fault, or "json" for syntax errors
  std::string problem;

  std::string to_string() const {
    if (line == 0) return fmt::format("{}: {}: {}", file, field, problem);
    return fmt::format("{}:{}: {}: {}", file, line, field, problem);
  }
};

template <class T>
using InputResult = Result<T, InputError>;
using InputStatus = Result<void, InputError>;

}  // namespace kvreplay

// The BurstGPT traces, CSV.
//
// Grammar (csv.h for the CSV itself; columns matched case-insensitively, in any
// order, extra columns ignored):
//   Timestamp        seconds from the trace start (number >= 0, at most 2^33:
//                    kMaxArrivalSeconds in request.h) -> arrival; never smaller
//                    than the row before
//   Request tokens   -> prompt (int >= 1)
//   Response tokens  -> output (int >= 0); 0 marks a failed request: the row is
//                    skipped and counted in skipped()
//   Model, Total tokens, Log Type: not used
// The id is the row's line number. Example:
//   Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type
//   5,ChatGPT,472,18,490,Conversation log
//   45,GPT-4,1087,0,1087,Conversation log        <- failed, skipped
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/requests/csv.h"
#include "formats/requests/format_entry.h"
#include "formats/requests/format_reader.h"

namespace kvreplay::requests {

inline constexpr std::string_view kBurstGptHeader =
    "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type";

class BurstGptReader final : public FormatReader {
 public:
  // Takes over `rows`, which holds the header row (named `names`, from header_names).
  static InputResult<std::unique_ptr<FormatReader>> create(CsvRows rows,
                                                           const std::vector<std::string>& names);
  InputResult<bool> next(Request& out) override;
  std::uint64_t skipped() const override { return skipped_; }

 private:
  explicit BurstGptReader(CsvRows rows) : rows_(std::move(rows)) {}

  CsvRows rows_;
  std::size_t columns_ = 0;
  std::size_t col_time_ = 0, col_prompt_ = 0, col_output_ = 0;
  bool done_ = false;
  std::uint64_t skipped_ = 0;
  bool has_last_ = false;
  double last_arrival_ = 0.0;
};

// "burstgpt": told by a Request tokens or Response tokens column.
extern const RequestFormatEntry kBurstGptFormat;

}  // namespace kvreplay::requests

// The Azure LLM inference traces (2023/2024), CSV.
//
// Grammar (csv.h for the CSV itself; columns matched case-insensitively, in any
// order, extra columns ignored):
//   TIMESTAMP        "YYYY-MM-DD HH:MM:SS[.fraction]" (a 'T' separator, up to 9
//                    fraction digits and a "Z" or "+HH:MM" / "-HH:MM" suffix are
//                    accepted), read exactly as integer nanoseconds with no locale
//                    or time-zone lookup; arrival = seconds since the first row,
//                    at most 2^33 s (kMaxArrivalSeconds in request.h); never
//                    earlier than the row before. start() is the first row's
//                    TIMESTAMP as written (with allow_unsorted: the earliest row's,
//                    and arrivals before the first row are negative)
//   ContextTokens    -> prompt (int >= 1)
//   GeneratedTokens  -> output (int >= 1)
// The id is the row's line number. Example:
//   TIMESTAMP,ContextTokens,GeneratedTokens
//   2023-11-16 18:15:46.6805900,4808,10
//   2023-11-16 18:15:50.9951690,3180,8
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "formats/requests/csv.h"
#include "formats/requests/date_time.h"
#include "formats/requests/format_entry.h"
#include "formats/requests/format_reader.h"

namespace kvreplay::requests {

inline constexpr std::string_view kAzureHeader = "TIMESTAMP,ContextTokens,GeneratedTokens";

class AzureReader final : public FormatReader {
 public:
  // Takes over `rows`, which holds the header row (named `names`, from header_names).
  static InputResult<std::unique_ptr<FormatReader>> create(CsvRows rows,
                                                           const std::vector<std::string>& names);
  InputResult<bool> next(Request& out) override;
  std::optional<std::string> start() const override {
    if (!has_last_) return std::nullopt;
    return earliest_text_;
  }

 private:
  explicit AzureReader(CsvRows rows) : rows_(std::move(rows)) {}

  CsvRows rows_;
  std::size_t columns_ = 0;
  std::size_t col_time_ = 0, col_prompt_ = 0, col_output_ = 0;
  bool done_ = false;
  bool has_last_ = false;
  Instant origin_;
  Instant last_;
  std::string last_text_;
  Instant earliest_;
  std::string earliest_text_;
};

// "azure": told by a ContextTokens or GeneratedTokens column.
extern const RequestFormatEntry kAzureFormat;

}  // namespace kvreplay::requests

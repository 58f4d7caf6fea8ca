#include "formats/requests/azure_reader.h"

#include <fmt/format.h>

#include <array>

namespace kvreplay::requests {

namespace {

constexpr std::string_view kAzureColumns[] = {"contexttokens", "generatedtokens"};

}  // namespace

const RequestFormatEntry kAzureFormat = {RequestFormat::kAzure,
                                         "azure",
                                         "Azure",
                                         "the Azure LLM inference traces' CSV",
                                         Layout::kCsv,
                                         {},
                                         {kAzureColumns, kAzureHeader, AzureReader::create}};

InputResult<std::unique_ptr<FormatReader>> AzureReader::create(
    CsvRows rows, const std::vector<std::string>& names) {
  std::unique_ptr<AzureReader> reader(new AzureReader(std::move(rows)));
  reader->columns_ = names.size();
  const std::array<CsvColumn, 3> wanted{{{"TIMESTAMP", &reader->col_time_},
                                         {"ContextTokens", &reader->col_prompt_},
                                         {"GeneratedTokens", &reader->col_output_}}};
  if (auto status = find_columns(reader->rows_, names, wanted, "Azure", kAzureHeader); !status)
    return Unexpected{status.error()};
  return std::unique_ptr<FormatReader>(std::move(reader));
}

InputResult<bool> AzureReader::next(Request& out) {
  if (done_) return false;
  auto more = rows_.read_record(columns_);
  if (!more) return Unexpected{more.error()};
  if (!more.value()) {
    done_ = true;
    return false;
  }
  const std::uint64_t line = rows_.row_line();
  std::string_view text = trim(rows_.field(col_time_));
  auto instant = parse_datetime(text);
  if (!instant) return Unexpected{rows_.error_at(line, "TIMESTAMP", instant.error())};
  if (!has_last_) {
    origin_ = instant.value();
    earliest_ = instant.value();
    earliest_text_.assign(text);
  } else if (instant.value() < last_ && !unsorted_ok()) {
    return Unexpected{rows_.error_at(line, "TIMESTAMP",
                                     fmt::format("{} goes backwards (previous TIMESTAMP was {}){}",
                                                 text, last_text_, sort_hint(rows_.name())))};
  }
  // Exactly, in whole seconds then nanoseconds: a date has at most 4 digits
  // of year, so the difference fits an int64 with room to spare.
  const std::int64_t apart = instant.value().seconds - origin_.seconds;
  const std::int64_t apart_ns = instant.value().nanos - origin_.nanos;
  constexpr auto kBound = static_cast<std::int64_t>(kMaxArrivalSeconds);
  if (apart > kBound || (apart == kBound && apart_ns > 0) || apart < -kBound ||
      (apart == -kBound && apart_ns < 0)) {
    return Unexpected{
        rows_.error_at(line, "TIMESTAMP",
                       past_arrival_bound(fmt::format("{} ({} s {} the first row)", text,
                                                      apart < 0 ? -apart : apart,
                                                      apart < 0 ? "before" : "after")))};
  }
  has_last_ = true;
  last_ = instant.value();
  last_text_.assign(text);
  if (last_ < earliest_) {
    earliest_ = last_;
    earliest_text_.assign(text);
  }
  const double arrival =
      last_ < origin_ ? -seconds_between(last_, origin_) : seconds_between(origin_, last_);
  auto prompt = rows_.uint_field(col_prompt_, "ContextTokens", 1);
  if (!prompt) return Unexpected{prompt.error()};
  auto output = rows_.uint_field(col_output_, "GeneratedTokens", 1);
  if (!output) return Unexpected{output.error()};
  set_csv_request(out, line, arrival, prompt.value(), output.value());
  return true;
}

}  // namespace kvreplay::requests

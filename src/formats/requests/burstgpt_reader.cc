#include "formats/requests/burstgpt_reader.h"

#include <fmt/format.h>

#include <array>

namespace kvreplay::requests {

namespace {

constexpr std::string_view kBurstGptColumns[] = {"request tokens", "response tokens"};

}  // namespace

const RequestFormatEntry kBurstGptFormat = {
    RequestFormat::kBurstGpt,
    "burstgpt",
    "BurstGPT",
    "the BurstGPT traces' CSV",
    Layout::kCsv,
    {},
    {kBurstGptColumns, kBurstGptHeader, BurstGptReader::create}};

InputResult<std::unique_ptr<FormatReader>> BurstGptReader::create(
    CsvRows rows, const std::vector<std::string>& names) {
  std::unique_ptr<BurstGptReader> reader(new BurstGptReader(std::move(rows)));
  reader->columns_ = names.size();
  const std::array<CsvColumn, 3> wanted{{{"Timestamp", &reader->col_time_},
                                         {"Request tokens", &reader->col_prompt_},
                                         {"Response tokens", &reader->col_output_}}};
  if (auto status = find_columns(reader->rows_, names, wanted, "BurstGPT", kBurstGptHeader);
      !status)
    return Unexpected{status.error()};
  return std::unique_ptr<FormatReader>(std::move(reader));
}

InputResult<bool> BurstGptReader::next(Request& out) {
  for (;;) {
    if (done_) return false;
    auto more = rows_.read_record(columns_);
    if (!more) return Unexpected{more.error()};
    if (!more.value()) {
      done_ = true;
      return false;
    }
    const std::uint64_t line = rows_.row_line();
    auto seconds = rows_.seconds_field(col_time_, "Timestamp");
    if (!seconds) return Unexpected{seconds.error()};
    if (seconds.value() > kMaxArrivalSeconds) {
      return Unexpected{
          rows_.error_at(line, "Timestamp", past_arrival_bound(trim(rows_.field(col_time_))))};
    }
    if (has_last_ && seconds.value() < last_arrival_ && !unsorted_ok()) {
      return Unexpected{rows_.error_at(
          line, "Timestamp",
          fmt::format("{} goes backwards (previous Timestamp was {}){}",
                      trim(rows_.field(col_time_)), last_arrival_, sort_hint(rows_.name())))};
    }
    has_last_ = true;
    last_arrival_ = seconds.value();
    auto prompt = rows_.uint_field(col_prompt_, "Request tokens", 1);
    if (!prompt) return Unexpected{prompt.error()};
    auto output = rows_.uint_field(col_output_, "Response tokens", 0);
    if (!output) return Unexpected{output.error()};
    if (output.value() == 0) {  // a failed request
      ++skipped_;
      continue;
    }
    set_csv_request(out, line, seconds.value(), prompt.value(), output.value());
    return true;
  }
}

}  // namespace kvreplay::requests

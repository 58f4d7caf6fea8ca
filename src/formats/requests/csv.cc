#include "formats/requests/csv.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "formats/requests/request_reader.h"

namespace kvreplay::requests {

namespace {

constexpr std::uint64_t kMaxCount = 0xFFFFFFFFull;
constexpr std::size_t kMaxField = RequestReader::kMaxField;
constexpr std::size_t kMaxColumns = RequestReader::kMaxColumns;

bool all_digits(std::string_view text) {
  if (text.empty()) return false;
  for (char c : text) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

}  // namespace

std::string_view trim(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  return text;
}

std::string quoted(std::string_view text) {
  constexpr std::size_t kShown = 40;
  std::string out;
  if (text.size() > kShown) {
    out = fmt::format("'{}...'", text.substr(0, kShown));
  } else {
    out = fmt::format("'{}'", text);
  }
  return out;
}

std::string lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

CsvRows::CsvRows(ByteSource& source, const std::string& name)
    : source_(&source), name_(&name), pos_(source.begin()), end_(source.end()) {}

bool CsvRows::refill() {
  source_->advance_to(pos_);
  bool more = source_->refill();
  pos_ = source_->begin();
  end_ = source_->end();
  return more && pos_ != end_;
}

void CsvRows::skip_byte_order_mark() {
  while (end_ - pos_ < 3 && refill()) {
  }
  if (end_ - pos_ >= 3 && static_cast<unsigned char>(pos_[0]) == 0xEF &&
      static_cast<unsigned char>(pos_[1]) == 0xBB && static_cast<unsigned char>(pos_[2]) == 0xBF) {
    pos_ += 3;
  }
}

int CsvRows::skip_blank() {
  int c = peek();
  while (c == ' ' || c == '\t' || c == '\r' || c == '\n') {
    if (c == '\n') ++line_;
    ++pos_;
    c = peek();
  }
  return c;
}

InputResult<bool> CsvRows::read_row() {
  int c = skip_blank();
  if (c < 0) {
    if (!source_->error().empty()) return Unexpected{source_failure()};
    return false;
  }
  row_line_ = line_;
  row_.clear();
  spans_.clear();
  const std::string too_long = fmt::format("field longer than {} bytes", kMaxField);
  for (;;) {
    if (spans_.size() >= kMaxColumns) {
      return Unexpected{
          error_at(row_line_, "csv", fmt::format("more than {} fields", kMaxColumns))};
    }
    const std::size_t start = row_.size();
    c = peek();
    if (c == '"') {
      ++pos_;
      for (;;) {
        c = peek();
        if (c < 0) {
          if (!source_->error().empty()) return Unexpected{source_failure()};
          return Unexpected{error_at(row_line_, "csv", "unterminated quoted field")};
        }
        ++pos_;
        if (c == '"') {
          if (peek() != '"') break;
          ++pos_;
        } else if (c == '\n') {
          ++line_;
        }
        row_.push_back(static_cast<char>(c));
        if (row_.size() - start > kMaxField)
          return Unexpected{error_at(row_line_, "csv", too_long)};
      }
      for (c = peek(); c == ' ' || c == '\t'; c = peek()) ++pos_;
      if (c >= 0 && c != ',' && c != '\n' && c != '\r') {
        return Unexpected{
            error_at(line_, "csv",
                     fmt::format("expected ',' or end of line after a quoted field, got {}",
                                 c >= 0x20 && c < 0x7F ? fmt::format("'{}'", static_cast<char>(c))
                                                       : fmt::format("byte 0x{:02x}", c)))};
      }
    } else {
      for (;;) {
        if (pos_ == end_ && !refill()) break;
        const char* run = pos_;
        while (pos_ != end_ && *pos_ != ',' && *pos_ != '\n' && *pos_ != '\r' && *pos_ != '"')
          ++pos_;
        row_.append(run, static_cast<std::size_t>(pos_ - run));
        if (row_.size() - start > kMaxField)
          return Unexpected{error_at(row_line_, "csv", too_long)};
        if (pos_ != end_) break;
      }
      c = peek();
      if (c == '"') {
        return Unexpected{
            error_at(line_, "csv", "'\"' inside an unquoted field (quote the whole field)")};
      }
    }
    spans_.emplace_back(start, row_.size() - start);
    c = peek();
    if (c == ',') {
      ++pos_;
      continue;
    }
    if (c == '\r') {
      ++pos_;
      c = peek();
      if (c >= 0 && c != '\n') {
        return Unexpected{error_at(line_, "csv", "carriage return inside an unquoted field")};
      }
    }
    if (c == '\n') {
      ++pos_;
      ++line_;
    } else if (c < 0 && !source_->error().empty()) {
      return Unexpected{source_failure()};
    }
    return true;
  }
}

InputResult<bool> CsvRows::read_record(std::size_t columns) {
  auto more = read_row();
  if (!more || !more.value()) return more;
  if (spans_.size() != columns) {
    return Unexpected{
        error_at(row_line_, "csv",
                 fmt::format("{} fields, expected {} as in the header", spans_.size(), columns))};
  }
  return true;
}

InputResult<std::uint32_t> CsvRows::uint_field(std::size_t column, std::string_view field_name,
                                               std::uint64_t min) const {
  std::string_view text = trim(field(column));
  if (text.empty()) {
    return Unexpected{error_at(row_line_, field_name, "empty (expected an integer)")};
  }
  if (text[0] == '-' && all_digits(text.substr(1))) {
    return Unexpected{
        error_at(row_line_, field_name, fmt::format("{} is negative (must be >= {})", text, min))};
  }
  if (!all_digits(text)) {
    return Unexpected{
        error_at(row_line_, field_name, fmt::format("expected an integer, got {}", quoted(text)))};
  }
  std::uint64_t value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc{} || ptr != text.data() + text.size() || value > kMaxCount) {
    return Unexpected{error_at(row_line_, field_name,
                               fmt::format("{} is too large (at most {})", text, kMaxCount))};
  }
  if (value < min) {
    return Unexpected{
        error_at(row_line_, field_name, fmt::format("{} (must be >= {})", text, min))};
  }
  return static_cast<std::uint32_t>(value);
}

InputResult<double> CsvRows::seconds_field(std::size_t column, std::string_view field_name) const {
  std::string_view text = trim(field(column));
  if (text.empty()) return Unexpected{error_at(row_line_, field_name, "empty (expected a number)")};
  const char first = text[0] == '-' ? (text.size() > 1 ? text[1] : '\0') : text[0];
  double value = 0.0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if ((first < '0' || first > '9') && first != '.') ec = std::errc::invalid_argument;
  if (ec == std::errc::result_out_of_range || (ec == std::errc{} && !std::isfinite(value))) {
    return Unexpected{error_at(row_line_, field_name, fmt::format("{} is out of range", text))};
  }
  if (ec != std::errc{} || ptr != text.data() + text.size()) {
    return Unexpected{
        error_at(row_line_, field_name, fmt::format("expected a number, got {}", quoted(text)))};
  }
  if (value < 0) {
    return Unexpected{
        error_at(row_line_, field_name, fmt::format("{} is negative (must be >= 0)", text))};
  }
  return value + 0.0;
}

std::vector<std::string> header_names(const CsvRows& rows) {
  std::vector<std::string> names;
  names.reserve(rows.size());
  for (std::size_t i = 0; i < rows.size(); ++i) names.push_back(lower(trim(rows.field(i))));
  return names;
}

InputStatus find_columns(const CsvRows& rows, const std::vector<std::string>& names,
                         std::span<const CsvColumn> wanted, std::string_view label,
                         std::string_view header) {
  const std::size_t columns = names.size();
  for (const CsvColumn& column : wanted) {
    const std::string key_name = lower(column.name);
    std::size_t found = columns;
    for (std::size_t i = 0; i < columns; ++i) {
      if (names[i] != key_name) continue;
      if (found != columns) {
        return Unexpected{rows.error_at(rows.row_line(), "header",
                                        fmt::format("column '{}' appears twice", column.name))};
      }
      found = i;
    }
    if (found == columns) {
      return Unexpected{rows.error_at(
          rows.row_line(), "header",
          fmt::format("no column '{}' (an {} trace's header is {})", column.name, label, header))};
    }
    *column.index = found;
  }
  return {};
}

void set_csv_request(Request& out, std::uint64_t line, double arrival, std::uint32_t prompt,
                     std::uint32_t output) {
  out.line = line;
  out.arrival = arrival;
  out.id = std::to_string(line);
  out.prompt = prompt;
  out.output = output;
  out.n = 1;
  out.prefix.clear();
  out.prefix_tokens = 0;
  out.session.clear();
  out.hash_ids.clear();
  out.hash_block_tokens = 512;
}

}  // namespace kvreplay::requests

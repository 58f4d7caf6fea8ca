// The public face of the request readers: opens the bytes and hands them to
// the reader of their format (requests/detect.h picks it; one file pair per
// format in requests/).
#include "formats/requests/request_reader.h"

#include <fmt/format.h>

#include <utility>
#include <vector>

#include "formats/requests/detect.h"
#include "io/byte_source.h"

namespace kvreplay {

namespace requests {

std::string sort_hint(std::string_view name) {
  std::string shown = name == "<stdin>" ? std::string("-") : std::string(name);
  const bool plain = !shown.empty() && shown.find_first_not_of(
                                           "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                           "0123456789_./+-=:,@%") == std::string::npos;
  if (!plain) {  // quoted for a POSIX shell
    std::string quoted = "'";
    for (char c : shown) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    shown = quoted + "'";
  }
  return fmt::format("; sort it by arrival first: kvreplay convert --sort {} -o sorted.jsonl",
                     shown);
}

}  // namespace requests

std::string past_arrival_bound(std::string_view value) {
  return fmt::format(
      "{} is past the arrival bound of 2^33 s (8589934592 s, about 272 years; beyond it a "
      "double no longer resolves microseconds)",
      value);
}

std::string reserved_hash_id(std::uint64_t value) {
  return fmt::format(
      "{} is past the hash id limit of 2^62 - 1 ({}; kvreplay keys its own pages above it)", value,
      kMaxTraceHashId);
}

struct RequestReader::Impl {
  Impl(std::unique_ptr<ByteSource> byte_source, std::string file_name)
      : source(std::move(byte_source)), name(std::move(file_name)) {}

  // The reader refers to both, so they are declared (and outlive it) first.
  std::unique_ptr<ByteSource> source;
  std::string name;
  RequestFormat format = RequestFormat::kNative;
  std::unique_ptr<requests::FormatReader> reader;

  InputStatus init(std::optional<RequestFormat> forced) {
    auto detected = requests::detect_format(*source, name, forced);
    if (!detected) return Unexpected{detected.error()};
    format = detected.value().format;
    reader = std::move(detected.value().reader);
    return {};
  }
};

RequestReader::RequestReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RequestReader::~RequestReader() = default;

InputResult<std::unique_ptr<RequestReader>> RequestReader::open(const std::string& path,
                                                                std::optional<RequestFormat> forced,
                                                                const std::string& shown_as) {
  const std::string& shown = shown_as.empty() ? path : shown_as;
  std::string name = shown == "-" ? "<stdin>" : shown;
  auto source = ByteSource::open(path);
  if (!source) return Unexpected{InputError{name, 0, "file", "cannot open: " + source.error()}};
  auto impl = std::make_unique<Impl>(std::move(source).value(), name);
  if (auto status = impl->init(forced); !status) return Unexpected{status.error()};
  return std::unique_ptr<RequestReader>(new RequestReader(std::move(impl)));
}

InputResult<std::unique_ptr<RequestReader>> RequestReader::from_string(
    std::string data, const std::string& name, std::optional<RequestFormat> forced) {
  auto impl = std::make_unique<Impl>(ByteSource::from_string(std::move(data)), name);
  if (auto status = impl->init(forced); !status) return Unexpected{status.error()};
  return std::unique_ptr<RequestReader>(new RequestReader(std::move(impl)));
}

RequestFormat RequestReader::format() const {
  return impl_->format;
}
const std::string& RequestReader::name() const {
  return impl_->name;
}
std::uint64_t RequestReader::skipped() const {
  return impl_->reader->skipped();
}
void RequestReader::allow_unsorted() {
  impl_->reader->allow_unsorted();
}
std::optional<std::string> RequestReader::start() const {
  return impl_->reader->start();
}

InputResult<std::string> RequestReader::content_sha256() {
  auto digest = impl_->source->content_sha256();
  if (!digest) return Unexpected{InputError{impl_->name, 0, "file", digest.error()}};
  return std::move(digest).value();
}

InputResult<bool> RequestReader::next(Request& out) {
  return impl_->reader->next(out);
}

}  // namespace kvreplay

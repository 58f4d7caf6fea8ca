#include "sim/convert.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <iterator>

#include "sim/json_text.h"
#include "sim/request_reader.h"

namespace kvreplay {

namespace {

constexpr int kExitOk = 0;
constexpr int kExitInput = 2;
constexpr std::size_t kFlushBytes = std::size_t{1} << 16;

// Where converted records go: stdout, or a temporary file renamed into place
// by commit(). The temporary file is removed unless committed.
class Sink {
 public:
  ~Sink() {
    if (file_ != nullptr && file_ != stdout) {
      std::fclose(file_);
      if (!direct_) std::remove(temp_.c_str());
    }
  }

  bool open(const std::string& path) {
    path_ = path;
    if (path == "-") {
      file_ = stdout;
      return true;
    }
    // A device or pipe (/dev/null, /dev/stdout, a FIFO) is written directly:
    // renaming a temporary file over it would replace it.
    struct stat info {};
    if (::stat(path.c_str(), &info) == 0 && !S_ISREG(info.st_mode)) {
      file_ = std::fopen(path.c_str(), "wb");
      direct_ = true;
      if (file_ == nullptr) why_ = std::strerror(errno);
      return file_ != nullptr;
    }
    temp_ = path + ".tmp." + std::to_string(::getpid());
    file_ = std::fopen(temp_.c_str(), "wb");
    if (file_ == nullptr) why_ = std::strerror(errno);
    return file_ != nullptr;
  }

  bool write(const std::string& text) {
    if (std::fwrite(text.data(), 1, text.size(), file_) == text.size()) return true;
    why_ = std::strerror(errno);
    return false;
  }

  bool commit() {
    if (file_ == stdout) {
      if (std::fflush(stdout) == 0) return true;
      why_ = std::strerror(errno);
      return false;
    }
    bool ok = std::fclose(file_) == 0;
    file_ = nullptr;
    if (direct_) {
      if (!ok) why_ = std::strerror(errno);
      return ok;
    }
    if (!ok || std::rename(temp_.c_str(), path_.c_str()) != 0) {
      why_ = std::strerror(errno);
      std::remove(temp_.c_str());
      return false;
    }
    return true;
  }

  const std::string& why() const { return why_; }

 private:
  std::FILE* file_ = nullptr;
  bool direct_ = false;
  std::string path_;
  std::string temp_;
  std::string why_;
};

int write_failed(const std::string& output, const std::string& why) {
  fmt::print(stderr, "{}: cannot write: {}\n", output == "-" ? "<stdout>" : output, why);
  return kExitInput;
}

}  // namespace

void append_native_json(std::string& out, const Request& request) {
  auto it = std::back_inserter(out);
  fmt::format_to(it, "{{\"arrival\": {}, \"id\": ", request.arrival);
  if (request.id.empty()) {
    fmt::format_to(it, "{}", request.line);
  } else {
    out += request.id;
  }
  fmt::format_to(it, ", \"prompt\": {}, \"output\": {}", request.prompt, request.output);
  if (request.n != 1) fmt::format_to(it, ", \"n\": {}", request.n);
  if (!request.prefix.empty()) {
    out += ", \"prefix\": ";
    append_json_string(out, request.prefix);
    fmt::format_to(it, ", \"prefix_tokens\": {}", request.prefix_tokens);
  }
  if (!request.hash_ids.empty()) {
    fmt::format_to(it, ", \"hash_block_tokens\": {}, \"hash_ids\": [", request.hash_block_tokens);
    bool first = true;
    for (std::uint64_t id : request.hash_ids) {
      if (!first) out += ", ";
      first = false;
      fmt::format_int text(id);
      out.append(text.data(), text.size());
    }
    out += ']';
  }
  out += "}\n";
}

int run_convert(const std::string& input, std::optional<RequestFormat> forced,
                const std::string& output) {
  auto opened = RequestReader::open(input, forced);
  if (!opened) {
    fmt::print(stderr, "{}\n", opened.error().to_string());
    return kExitInput;
  }
  RequestReader& reader = *opened.value();
  Sink sink;
  if (!sink.open(output)) return write_failed(output, sink.why());
  std::string buffer;
  buffer.reserve(kFlushBytes * 2);
  Request request;
  std::uint64_t count = 0;
  for (;;) {
    auto more = reader.next(request);
    if (!more) {
      fmt::print(stderr, "{}\n", more.error().to_string());
      return kExitInput;  // the sink removes its temporary file
    }
    if (!more.value()) break;
    append_native_json(buffer, request);
    ++count;
    if (buffer.size() >= kFlushBytes) {
      if (!sink.write(buffer)) return write_failed(output, sink.why());
      buffer.clear();
    }
  }
  if (!sink.write(buffer) || !sink.commit()) return write_failed(output, sink.why());
  std::string skipped;
  if (reader.skipped() > 0) {
    skipped = fmt::format(", skipped {} failed request{} (0 response tokens)", reader.skipped(),
                          reader.skipped() == 1 ? "" : "s");
  }
  if (output == "-") {
    if (!skipped.empty()) fmt::print(stderr, "kvreplay convert: {}\n", skipped.substr(2));
  } else {
    fmt::print("converted {} request{} ({} -> native) to {}{}\n", count, count == 1 ? "" : "s",
               to_string(reader.format()), output, skipped);
  }
  return kExitOk;
}

}  // namespace kvreplay

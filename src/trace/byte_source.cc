#include "trace/byte_source.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace kvreplay {

namespace {
constexpr std::size_t kChunk = 1 << 16;

// zlib's message, without the "<fd:3>: " it puts before it.
std::string corrupt_gzip(const char* message) {
  std::string text = message != nullptr ? message : "unknown error";
  if (text.rfind("<fd:", 0) == 0) {
    if (auto colon = text.find(": "); colon != std::string::npos) text.erase(0, colon + 2);
  }
  return "corrupt gzip data: " + text;
}
}  // namespace

Result<std::unique_ptr<ByteSource>, std::string> ByteSource::open(const std::string& path) {
  int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unexpected{std::string(std::strerror(errno))};
  // Peek at the magic bytes only for regular files; zlib handles both anyway.
  std::unique_ptr<ByteSource> source(new ByteSource());
  source->gz_ = gzdopen(fd, "rb");
  if (source->gz_ == nullptr) {
    ::close(fd);
    return Unexpected{std::string("cannot allocate a reader")};
  }
  gzbuffer(source->gz_, kChunk);
  source->data_.resize(kChunk);
  return source;
}

std::unique_ptr<ByteSource> ByteSource::from_string(std::string data) {
  std::unique_ptr<ByteSource> source(new ByteSource());
  source->memory_ = true;
  source->data_.assign(data.begin(), data.end());
  source->size_ = source->data_.size();
  source->hash_.update(source->data_.data(), source->size_);
  return source;
}

ByteSource::~ByteSource() {
  if (gz_ != nullptr) gzclose(gz_);
}

bool ByteSource::refill() {
  if (memory_ || gz_ == nullptr || !error_.empty()) return false;
  // Keep unread bytes, then read more after them.
  std::size_t unread = size_ - start_;
  if (start_ > 0 && unread > 0) std::memmove(data_.data(), data_.data() + start_, unread);
  start_ = 0;
  size_ = unread;
  if (data_.size() - size_ < kChunk) data_.resize(size_ + kChunk);
  int got = gzread(gz_, data_.data() + size_, static_cast<unsigned>(data_.size() - size_));
  if (got < 0) {
    int code = 0;
    const char* message = gzerror(gz_, &code);
    error_ = code == Z_ERRNO ? std::string(std::strerror(errno)) : corrupt_gzip(message);
    return false;
  }
  if (got == 0) {
    int code = 0;
    const char* message = gzerror(gz_, &code);
    if (code == Z_BUF_ERROR) {
      error_ = "truncated gzip data";
    } else if (code != Z_OK && code != Z_STREAM_END) {
      error_ = corrupt_gzip(message);
    }
    return false;
  }
  compressed_ = compressed_ || gzdirect(gz_) == 0;
  hash_.update(data_.data() + size_, static_cast<std::size_t>(got));
  size_ += static_cast<std::size_t>(got);
  return true;
}

Result<std::string, std::string> ByteSource::content_sha256() {
  for (;;) {
    start_ = size_;  // nothing left to keep: the caller is done parsing
    if (!refill()) break;
  }
  if (!error_.empty()) return Unexpected{error_};
  return hash_.hex_digest();
}

}  // namespace kvreplay

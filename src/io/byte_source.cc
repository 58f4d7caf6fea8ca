#include "io/byte_source.h"

#include <atomic>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/input_registry.h"

namespace kvreplay {

namespace {
constexpr std::size_t kChunk = 1 << 16;
constexpr unsigned char kGzipMagic0 = 0x1f;
constexpr unsigned char kGzipMagic1 = 0x8b;

std::string corrupt_gzip(const char* message) {
  return std::string("corrupt gzip data: ") + (message != nullptr ? message : "unknown error");
}
}  // namespace

static std::atomic<int> g_next_tee{-1};

void ByteSource::tee_next_source(int fd) {
  g_next_tee.store(fd);
}

bool ByteSource::tee(const void* bytes, std::size_t n) {
  const char* data = static_cast<const char*>(bytes);
  while (tee_fd_ >= 0 && n > 0) {
    const ssize_t put = ::write(tee_fd_, data, n);
    if (put < 0 && errno == EINTR) continue;
    if (put <= 0) {
      error_ = std::string("cannot spool the input: ") + std::strerror(put < 0 ? errno : EIO);
      return false;
    }
    data += put;
    n -= static_cast<std::size_t>(put);
  }
  return true;
}

Result<std::unique_ptr<ByteSource>, std::string> ByteSource::open(const std::string& path) {
  int fd = path == "-" ? dup(STDIN_FILENO) : ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Unexpected{std::string(std::strerror(errno))};
  record_input(fd, path);  // no output of this run may replace it
  std::unique_ptr<ByteSource> source(new ByteSource());
  source->fd_ = fd;
  source->tee_fd_ = g_next_tee.exchange(-1);
  source->input_.resize(kChunk);
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
  if (inflating_) inflateEnd(&stream_);
  if (fd_ >= 0) ::close(fd_);
}

bool ByteSource::read_input() {
  if (input_eof_) return false;
  if (input_start_ > 0) {
    std::memmove(input_.data(), input_.data() + input_start_, input_end_ - input_start_);
    input_end_ -= input_start_;
    input_start_ = 0;
  }
  for (;;) {
    ssize_t got = ::read(fd_, input_.data() + input_end_, input_.size() - input_end_);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      error_ = std::strerror(errno);
      return false;
    }
    if (got == 0) {
      input_eof_ = true;
      return false;
    }
    if (!tee(input_.data() + input_end_, static_cast<std::size_t>(got))) return false;
    input_end_ += static_cast<std::size_t>(got);
    return true;
  }
}

bool ByteSource::start() {
  started_ = true;
  while (input_end_ - input_start_ < 2 && read_input()) {
  }
  if (!error_.empty()) return false;
  if (input_end_ - input_start_ >= 2 && input_[input_start_] == kGzipMagic0 &&
      input_[input_start_ + 1] == kGzipMagic1) {
    stream_ = z_stream{};
    if (inflateInit2(&stream_, 15 + 16) != Z_OK) {  // 16: a gzip wrapper, not zlib's
      error_ = "cannot allocate a gzip decompressor";
      return false;
    }
    inflating_ = true;
  }
  return true;
}

std::size_t ByteSource::produce_gzip(char* out, std::size_t space) {
  std::size_t made = 0;
  while (made < space) {
    if (input_start_ == input_end_ && !read_input()) {
      if (!error_.empty()) break;
      // End of file: fine between members, truncated inside one.
      if (in_member_) error_ = "truncated gzip data";
      finished_ = error_.empty();
      break;
    }
    if (!in_member_) {
      // Another member must start here (gzip(1) concatenation); anything else
      // after the gzip data is refused, not ignored.
      if (input_[input_start_] != kGzipMagic0) {
        error_ = "bytes after the end of the gzip data are not another gzip member";
        break;
      }
      if (input_end_ - input_start_ < 2) {
        if (!read_input()) {
          if (error_.empty()) error_ = "truncated gzip data";
          break;
        }
        continue;
      }
      if (input_[input_start_ + 1] != kGzipMagic1) {
        error_ = "bytes after the end of the gzip data are not another gzip member";
        break;
      }
      if (inflateReset(&stream_) != Z_OK) {
        error_ = corrupt_gzip(stream_.msg);
        break;
      }
      in_member_ = true;
    }
    stream_.next_in = input_.data() + input_start_;
    stream_.avail_in = static_cast<uInt>(input_end_ - input_start_);
    stream_.next_out = reinterpret_cast<Bytef*>(out + made);
    stream_.avail_out = static_cast<uInt>(std::min<std::size_t>(space - made, 1u << 30));
    int code = inflate(&stream_, Z_NO_FLUSH);
    input_start_ = input_end_ - stream_.avail_in;
    made = static_cast<std::size_t>(reinterpret_cast<char*>(stream_.next_out) - out);
    if (code == Z_STREAM_END) {
      in_member_ = false;
    } else if (code == Z_BUF_ERROR) {
      // No progress: it needs more input (read at the top of the loop).
      if (input_start_ != input_end_) {
        error_ = corrupt_gzip(stream_.msg);
        break;
      }
    } else if (code == Z_MEM_ERROR) {
      error_ = "out of memory decompressing gzip data";
      break;
    } else if (code != Z_OK) {
      error_ = corrupt_gzip(stream_.msg);
      break;
    }
  }
  return made;
}

std::size_t ByteSource::produce(char* out, std::size_t space) {
  if (!started_ && !start()) return 0;
  if (inflating_) return produce_gzip(out, space);
  std::size_t made = 0;
  while (made < space) {
    if (input_start_ == input_end_) {
      // Large reads go straight to the output.
      input_start_ = input_end_ = 0;
      ssize_t got = ::read(fd_, out + made, space - made);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) {
        error_ = std::strerror(errno);
        break;
      }
      if (got == 0) {
        input_eof_ = finished_ = true;
        break;
      }
      if (!tee(out + made, static_cast<std::size_t>(got))) break;
      made += static_cast<std::size_t>(got);
      continue;
    }
    std::size_t n = std::min(space - made, input_end_ - input_start_);
    std::memcpy(out + made, input_.data() + input_start_, n);
    input_start_ += n;
    made += n;
  }
  return made;
}

bool ByteSource::refill() {
  if (memory_ || fd_ < 0 || finished_ || !error_.empty()) return false;
  // Keep unread bytes, then read more after them.
  std::size_t unread = size_ - start_;
  if (start_ > 0 && unread > 0) std::memmove(data_.data(), data_.data() + start_, unread);
  start_ = 0;
  size_ = unread;
  if (data_.size() - size_ < kChunk) data_.resize(size_ + kChunk);
  // Fill the free space whole (or reach the end): the first refill then holds
  // the first 64 KiB of the input, or all of it.
  std::size_t got = produce(data_.data() + size_, data_.size() - size_);
  produced_ += got;
  if (produced_ > limit_) {
    error_ = limit_message_;
    return false;
  }
  hash_.update(data_.data() + size_, got);
  size_ += got;
  return got > 0;
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

#include "io/spool.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvreplay {

Result<SpooledInput, std::string> SpooledInput::from_stdin() {
  return from_fd(STDIN_FILENO);
}

namespace {

std::string spool_folder() {
  const char* tmpdir = std::getenv("TMPDIR");
  return tmpdir != nullptr && *tmpdir != '\0' ? tmpdir : "/tmp";
}

}  // namespace

Result<SpooledInput, std::string> SpooledInput::create() {
  const std::string folder = spool_folder();
  int fd = ::open(folder.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
    std::string name = folder + "/kvreplay-stdin.XXXXXX";
    fd = ::mkostemp(name.data(), O_CLOEXEC);
    if (fd >= 0) ::unlink(name.c_str());  // unnamed from now on: nothing to clean up
  }
  if (fd < 0) {
    return Unexpected{"cannot create a temporary file in " + folder + ": " + std::strerror(errno)};
  }
  return SpooledInput(fd, "/proc/self/fd/" + std::to_string(fd));
}

Result<SpooledInput, std::string> SpooledInput::from_fd(int in) {
  const std::string folder = spool_folder();
  auto made = create();
  if (!made) return Unexpected{made.error()};
  SpooledInput spool = std::move(made).value();
  const int fd = spool.fd_;
  std::vector<char> buffer(std::size_t{1} << 20);
  for (;;) {
    const ssize_t got = ::read(in, buffer.data(), buffer.size());
    if (got < 0 && errno == EINTR) continue;
    if (got < 0)
      return Unexpected{std::string("cannot read standard input: ") + std::strerror(errno)};
    if (got == 0) break;
    for (ssize_t done = 0; done < got;) {
      const ssize_t put = ::write(fd, buffer.data() + done, static_cast<std::size_t>(got - done));
      if (put < 0 && errno == EINTR) continue;
      if (put < 0) {
        return Unexpected{"cannot copy standard input to a temporary file in " + folder + ": " +
                          std::strerror(errno)};
      }
      done += put;
    }
  }
  return spool;
}

SpooledInput::SpooledInput(SpooledInput&& other) noexcept
    : fd_(other.fd_), path_(std::move(other.path_)) {
  other.fd_ = -1;
}

SpooledInput& SpooledInput::operator=(SpooledInput&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    path_ = std::move(other.path_);
    other.fd_ = -1;
  }
  return *this;
}

SpooledInput::~SpooledInput() {
  if (fd_ >= 0) ::close(fd_);
}

}  // namespace kvreplay

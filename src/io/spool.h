// SpooledInput: standard input copied once into an unnamed temporary file, for
// a command that reads its input several times (plan's simulations, each of
// which streams the trace from the start).
//
// The file is unlinked as soon as it is made, so nothing is left behind
// whatever ends the process (even SIGKILL); readers open it again through
// /proc/self/fd, each with an offset of its own.
#pragma once

#include <string>

#include "core/result.h"

namespace kvreplay {

class SpooledInput {
 public:
  // Copies standard input to the end into a temporary file in $TMPDIR (/tmp
  // when unset). Error: why, in words ("cannot create a temporary file in
  // /tmp: No space left on device").
  static Result<SpooledInput, std::string> from_stdin();
  // The same, from any descriptor (tests).
  static Result<SpooledInput, std::string> from_fd(int fd);
  // An empty spool, for a caller that copies into fd() itself while it reads
  // (ByteSource::tee_next_source): made with O_TMPFILE where the file
  // system has it, so it never has a name, even for an instant.
  static Result<SpooledInput, std::string> create();

  int fd() const { return fd_; }

  SpooledInput(SpooledInput&& other) noexcept;
  SpooledInput& operator=(SpooledInput&& other) noexcept;
  SpooledInput(const SpooledInput&) = delete;
  SpooledInput& operator=(const SpooledInput&) = delete;
  ~SpooledInput();

  // A path that opens the copy from its start: /proc/self/fd/N.
  const std::string& path() const { return path_; }

 private:
  SpooledInput(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  int fd_ = -1;
  std::string path_;
};

}  // namespace kvreplay

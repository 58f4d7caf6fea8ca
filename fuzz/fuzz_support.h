// Shared by the fuzz targets: the oracles every reader must satisfy on any
// input, and gzip input through the real file path.
//
// Oracles (a failure aborts, which libFuzzer and the plain driver report):
//   - bad input is one InputError whose printed form is a single line naming
//     the input, and whose line number lies inside the input;
//   - nothing the readers accept makes the engine break an invariant.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include "io/input_error.h"

namespace kvreplay::fuzz {

inline constexpr const char* kName = "fuzz-input";

[[noreturn]] inline void fail(std::string_view what, std::string_view detail) {
  std::fprintf(stderr, "fuzz oracle failed: %.*s: %.*s\n", static_cast<int>(what.size()),
               what.data(), static_cast<int>(detail.size()), detail.data());
  std::abort();
}

inline bool is_gzip(std::string_view data) {
  return data.size() >= 2 && static_cast<unsigned char>(data[0]) == 0x1F &&
         static_cast<unsigned char>(data[1]) == 0x8B;
}

// Lines of `data` as the readers count them (1 + newlines); unknown (0) for
// gzip, whose lines are those of the decompressed text.
inline std::uint64_t line_count(std::string_view data) {
  if (is_gzip(data)) return 0;
  std::uint64_t lines = 1;
  for (char c : data) lines += c == '\n' ? 1 : 0;
  return lines;
}

inline void check_error(const InputError& error, std::string_view data) {
  std::string text = error.to_string();
  if (text.find('\n') != std::string::npos) fail("error is not one line", text);
  if (error.problem.empty()) fail("error without a problem", text);
  if (error.file != kName && error.file.rfind("/proc/self/fd/", 0) != 0) {
    fail("error does not name the input", text);
  }
  if (std::uint64_t lines = line_count(data); lines != 0 && error.line > lines) {
    fail("error names a line past the input", text);
  }
}

// A memory file holding `data`, so that gzip input goes through the real
// ByteSource::open path (zlib). Closes on destruction.
class MemoryFile {
 public:
  explicit MemoryFile(std::string_view data) {
    fd_ = ::memfd_create("fuzz-input", MFD_CLOEXEC);
    if (fd_ < 0) fail("memfd_create", "failed");
    std::size_t done = 0;
    while (done < data.size()) {
      ssize_t n = ::write(fd_, data.data() + done, data.size() - done);
      if (n <= 0) fail("write to memfd", "failed");
      done += static_cast<std::size_t>(n);
    }
    path_ = "/proc/self/fd/" + std::to_string(fd_);
  }
  ~MemoryFile() { ::close(fd_); }
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

}  // namespace kvreplay::fuzz

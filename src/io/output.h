// The files a run writes (--report, --timeline, --html, convert -o, ...): one
// component, so that no output ever replaces what its path points at and a run
// that fails leaves nothing behind.
//
// What an output path names, and how it is written (OutputSet::open):
//   "-"            standard output (descriptor 1), written directly.
//   /dev/stdout, /dev/fd/1, /proc/self/fd/1 (a /proc link to the file that
//                  standard output already has open): standard output, as "-".
//   a symlink      followed to its final target, a dangling link's target too;
//                  the link stays a link and the target is written as below.
//   a character or block device, a FIFO, a socket, or another /proc descriptor
//   link (/dev/fd/3): written in place, opened O_WRONLY when the set is opened
//                  (a FIFO waits for its reader), never truncated, never
//                  replaced; a regular file reached through /proc is appended
//                  to, since whoever opened it chose where writing starts.
//   a regular file or a new path: written to an unnamed temporary file
//                  (O_TMPFILE) in the target's own folder, which no crash can
//                  leave behind, not even SIGKILL; OutputSet::commit() links it
//                  under a fresh name beside the target (linkat) and renames
//                  that over the target, so the named temporary exists only
//                  for the microseconds of the commit. Where the file system
//                  has no O_TMPFILE, a named temporary made by mkostemp
//                  (O_CLOEXEC) takes its place for the whole run (removed on
//                  any failure and on SIGINT/SIGTERM/SIGHUP/SIGPIPE, not on
//                  SIGKILL). The target's permission bits
//                  (and owner, where allowed) are kept; a new file gets
//                  0666 & ~umask. An existing file we may not write is refused
//                  (EACCES), as a shell redirection would refuse it.
//   a folder       refused (EISDIR).
// Temporary files are not fsync'ed: every output can be made again from the
// run's inputs, so a power loss is not worth a sync per file; close() is
// checked, so the write errors the kernel reports are all seen.
//
// A run's outputs form one set, committed together (OutputSet::commit):
//   1. every temporary file gets its last bytes and is closed;
//   2. every in-place output (stdout included) gets its held bytes;
//   3. only when all of that succeeded, every temporary is renamed, with the
//      catching signals blocked (temporaries.h).
// Any failure, before or during commit, removes every temporary not yet
// renamed, so no output of a failed run is presented as complete. What an
// in-place output already received (a streamed timeline on a FIFO) cannot be
// taken back. Errors: every write(), close() and rename() is checked (ENOSPC,
// EIO, EFBIG, EPIPE when SIGPIPE is ignored, ...); the first one is kept and
// given by error() as one line:
//   kvreplay: cannot write the report out.json: No space left on device
// Usage errors (two outputs on standard output, two outputs on one file, an
// output that is one of the run's inputs) read
//   command line: the report and the timeline both write to standard output
//   command line: --report a.csv is REQUESTS a.csv: an output never replaces an input
//   command line: --requests and --report are one file, out/./y.csv
// Every output is compared with every input (io/input_registry.h: each file
// the run opened for reading, and each add_input()) when it is opened, and its
// temporary's target again at the start of commit(), before any byte reaches
// anything: an input read during the run (a path named inside another input)
// cannot be replaced either.
// Files are compared by identity before anything is written (SPEC §8): device
// and inode for a file that exists (hard links and symlinks included, and
// standard input when it is a regular file), else the path with its folder
// resolved (realpath), so "out/./y.csv" and "out/y.csv" are one file. Devices,
// FIFOs and standard output are not files an output could destroy: two
// outputs on /dev/null are allowed.
#pragma once

#include <fmt/format.h>
#include <sys/types.h>

#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace kvreplay {

// What a path names, for telling whether two paths are one file.
struct FileIdentity {
  bool exists = false;  // a regular file: device and inode below
  dev_t device = 0;
  ino_t inode = 0;
  std::string new_path;  // a file not yet made: its path, folder resolved
  bool same_as(const FileIdentity& other) const;
  bool known() const { return exists || !new_path.empty(); }
};

class OutputFile {
 public:
  // kWhole: every byte is held until commit (a report, a page), so nothing
  // reaches an in-place output unless the whole set succeeds. kStream: bytes
  // go out whenever 64 KiB have gathered (a timeline, a conversion), so memory
  // stays flat however long the run.
  enum class Flow { kWhole, kStream };

  ~OutputFile();
  OutputFile(const OutputFile&) = delete;
  OutputFile& operator=(const OutputFile&) = delete;

  // Appends bytes. After a failure further bytes are dropped; the failure is
  // reported by OutputSet::commit().
  void write(std::string_view bytes);
  template <class... Args>
  void print(fmt::format_string<Args...> format, Args&&... args) {
    fmt::format_to(std::back_inserter(buffer_), format, std::forward<Args>(args)...);
    after_append();
  }

  bool failed() const { return error_ != 0; }
  const std::string& path() const { return path_; }  // as given
  bool is_stdout() const { return kind_ == Kind::kStdout; }

 private:
  friend class OutputSet;
  enum class Kind { kStdout, kInPlace, kTemporary };

  OutputFile(std::string what, std::string path, Flow flow);
  void after_append();
  void flush();  // writes the buffer out; records the first error
  void fail(int error);
  bool close_descriptor();
  bool link_temporary();  // an O_TMPFILE gets its name beside the target
  void remove_temporary();
  std::string message() const;

  std::string what_;  // "the report"
  std::string flag_;  // "--report", or empty
  FileIdentity identity_;
  bool unnamed_ = false;  // kTemporary through O_TMPFILE: no name until commit
  std::string path_;      // as given
  std::string target_;    // after symlinks: what a temporary is renamed over
  std::string temp_;      // kTemporary: the temporary file's path
  Kind kind_ = Kind::kTemporary;
  Flow flow_;
  int fd_ = -1;
  int slot_ = -1;  // in the temporaries registry
  std::string buffer_;
  int error_ = 0;  // the first errno
};

class OutputSet {
 public:
  OutputSet() = default;
  // Abandons whatever was not committed: every temporary is removed.
  ~OutputSet();
  OutputSet(const OutputSet&) = delete;
  OutputSet& operator=(const OutputSet&) = delete;

  // Opens `path` (see the top of this file) as the output `what` ("the
  // report"). nullptr when it cannot be opened or clashes with another output
  // of the set; error() is then the line to print (exit code 2). The pointer
  // stays valid until commit() or abandon().
  // `flag`: the option that named the path ("--report"), for the message of
  // a clash with an input or another output; empty: `what` names it.
  OutputFile* open(std::string what, const std::string& path,
                   OutputFile::Flow flow = OutputFile::Flow::kWhole, std::string flag = {});

  // Records a file the run reads (`name`: its argument or option, "REQUESTS",
  // "--model-config"), so that open() refuses an output that is that file.
  // "-" is standard input, recorded when it is a regular file (`< a.csv`).
  // A path that does not exist is not recorded: reading it fails later.
  void add_input(std::string name, const std::string& path);

  // Whether an output is standard output: the run's summary then goes to stderr.
  bool writes_stdout() const;
  // Whether an output has failed already (a run may stop early).
  bool failed() const;

  // Commits every output, all or nothing (see the top of this file). False:
  // error() says why and no temporary is left. A set commits once.
  [[nodiscard]] bool commit();
  // Removes every temporary and closes everything; the set is then empty.
  void abandon();

  // The line to print: why open() or commit() failed, or else the first
  // failure of an output; empty when nothing failed.
  std::string error() const;

 private:
  struct Input {
    std::string name, path;
    FileIdentity identity;
  };
  // The refusal when `identity` (of `file`'s target) is an input: one of
  // add_input()'s, or any file the run opened for reading (io/input_registry.h).
  std::optional<std::string> replaces_input(const OutputFile& file,
                                            const FileIdentity& identity) const;

  std::vector<std::unique_ptr<OutputFile>> files_;
  std::vector<Input> inputs_;
  std::string error_;
};

}  // namespace kvreplay

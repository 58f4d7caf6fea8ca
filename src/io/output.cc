#include "io/output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "io/input_registry.h"
#include "io/temporaries.h"

namespace kvreplay {

namespace {

constexpr std::size_t kStreamChunk = std::size_t{1} << 16;
constexpr int kMaxLinks = 40;  // as the kernel's ELOOP limit
constexpr long kProcSuperMagic = 0x9fa0;
constexpr std::string_view kTempSuffix = ".tmp.XXXXXX";

mode_t process_umask() {
  // Read once: umask() can only be read by setting it.
  static const mode_t mask = [] {
    const mode_t previous = ::umask(022);
    ::umask(previous);
    return previous;
  }();
  return mask;
}

std::string parent_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string base_of(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// A link in /proc (/proc/self/fd/1, where /dev/stdout and /dev/fd/N lead)
// names an open file rather than a path: it is opened, never followed by hand.
bool on_procfs(const std::string& link) {
  struct statfs info {};
  return ::statfs(parent_of(link).c_str(), &info) == 0 &&
         static_cast<long>(info.f_type) == kProcSuperMagic;
}

struct Target {
  enum class Kind { kStdout, kInPlace, kTemporary } kind = Kind::kTemporary;
  std::string path;     // the file to write or rename over
  bool exists = false;  // kTemporary: a regular file is there now
  struct stat info {};  // of that file
  bool append = false;  // kInPlace: a regular file reached through /proc
  FileIdentity identity;
};

// The folder part of `path` resolved (realpath), and its last component: the
// name a file not yet made will have, whatever "." , ".." and links spelled it.
std::string canonical_new_path(const std::string& path) {
  char resolved[PATH_MAX];
  if (::realpath(parent_of(path).c_str(), resolved) == nullptr) return path;
  std::string folder(resolved);
  if (folder.back() != '/') folder += '/';
  return folder + base_of(path);
}

// A name no file has yet, beside `target`: TARGET.tmp.PID.N (or a short name
// when that would be too long), for linkat() of an O_TMPFILE.
std::string fresh_temporary_name(const std::string& target, unsigned attempt) {
  static unsigned counter = 0;
  const std::string suffix = fmt::format(".tmp.{}.{}", ::getpid(), counter++ + attempt);
  return base_of(target).size() + suffix.size() <= NAME_MAX
             ? target + suffix
             : parent_of(target) + "/.kvreplay" + suffix;
}

// Where `given` leads (see output.h). Returns 0 or an errno value.
int resolve(const std::string& given, Target& out) {
  if (given == "-") {
    out.kind = Target::Kind::kStdout;
    return 0;
  }
  std::string current = given;
  for (int links = 0;; ++links) {
    struct stat info {};
    if (::lstat(current.c_str(), &info) != 0) {
      if (errno != ENOENT) return errno;
      out.kind = Target::Kind::kTemporary;  // a new file (its folder is checked when made)
      out.path = current;
      out.identity = {false, 0, 0, canonical_new_path(current)};
      return 0;
    }
    if (S_ISLNK(info.st_mode)) {
      if (links == kMaxLinks) return ELOOP;
      if (on_procfs(current)) {
        struct stat opened {};
        if (::stat(current.c_str(), &opened) != 0) return errno;
        if (S_ISDIR(opened.st_mode)) return EISDIR;
        struct stat standard_output {};
        if (::fstat(STDOUT_FILENO, &standard_output) == 0 &&
            standard_output.st_dev == opened.st_dev && standard_output.st_ino == opened.st_ino) {
          out.kind = Target::Kind::kStdout;
          return 0;
        }
        out.kind = Target::Kind::kInPlace;
        out.path = current;
        out.append = S_ISREG(opened.st_mode);
        if (out.append) out.identity = {true, opened.st_dev, opened.st_ino, {}};
        return 0;
      }
      char link[PATH_MAX];
      const ssize_t length = ::readlink(current.c_str(), link, sizeof link);
      if (length < 0) return errno;
      if (static_cast<std::size_t>(length) == sizeof link) return ENAMETOOLONG;
      std::string next(link, static_cast<std::size_t>(length));
      current = next.front() == '/' ? next : parent_of(current) + "/" + next;
      continue;
    }
    if (S_ISDIR(info.st_mode)) return EISDIR;
    out.path = current;
    out.info = info;
    if (S_ISREG(info.st_mode)) out.identity = {true, info.st_dev, info.st_ino, {}};
    if (S_ISREG(info.st_mode)) {
      // Renaming would replace a file that a plain write may not touch.
      if (::faccessat(AT_FDCWD, current.c_str(), W_OK, AT_EACCESS) != 0) return errno;
      out.kind = Target::Kind::kTemporary;
      out.exists = true;
    } else {
      out.kind = Target::Kind::kInPlace;  // device, FIFO, socket
    }
    return 0;
  }
}

}  // namespace

OutputFile::OutputFile(std::string what, std::string path, Flow flow)
    : what_(std::move(what)), path_(std::move(path)), flow_(flow) {}

OutputFile::~OutputFile() {
  if (fd_ >= 0 && kind_ != Kind::kStdout) ::close(fd_);
  remove_temporary();
}

void OutputFile::write(std::string_view bytes) {
  buffer_.append(bytes);
  after_append();
}

void OutputFile::after_append() {
  if (error_ != 0) {
    buffer_.clear();
  } else if (flow_ == Flow::kStream && buffer_.size() >= kStreamChunk) {
    flush();
  }
}

void OutputFile::flush() {
  if (error_ == 0 && !buffer_.empty()) {
    if (kind_ == Kind::kStdout) std::fflush(stdout);  // keep what was printed first, first
    const char* data = buffer_.data();
    std::size_t left = buffer_.size();
    while (left > 0) {
      const ssize_t written = ::write(fd_, data, left);
      if (written < 0) {
        if (errno == EINTR) continue;
        fail(errno);
        break;
      }
      if (written == 0) {
        fail(EIO);
        break;
      }
      data += written;
      left -= static_cast<std::size_t>(written);
    }
  }
  buffer_.clear();
}

void OutputFile::fail(int error) {
  if (error_ == 0) error_ = error;
}

bool OutputFile::close_descriptor() {
  if (fd_ < 0 || kind_ == Kind::kStdout) return error_ == 0;
  // Linux closes the descriptor even when close() fails; EINTR loses no data.
  if (::close(fd_) != 0 && errno != EINTR) fail(errno);
  fd_ = -1;
  return error_ == 0;
}

bool OutputFile::link_temporary() {
  // linkat through /proc/self/fd works without CAP_DAC_READ_SEARCH (which
  // AT_EMPTY_PATH needs); the name is fresh, so EEXIST means try another.
  const std::string source = fmt::format("/proc/self/fd/{}", fd_);
  BlockedSignals blocked;  // linked and registered, or neither
  for (unsigned attempt = 0; attempt < 100; ++attempt) {
    std::string name = fresh_temporary_name(target_, attempt);
    if (::linkat(AT_FDCWD, source.c_str(), AT_FDCWD, name.c_str(), AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) continue;
      fail(errno);
      return false;
    }
    slot_ = register_temporary(name.c_str());
    if (slot_ < 0) {
      ::unlink(name.c_str());
      fail(ENAMETOOLONG);
      return false;
    }
    temp_ = std::move(name);
    unnamed_ = false;
    return true;
  }
  fail(EEXIST);
  return false;
}

void OutputFile::remove_temporary() {
  if (temp_.empty()) return;
  ::unlink(temp_.c_str());
  release_temporary(slot_);  // after the unlink: a signal in between unlinks it again
  slot_ = -1;
  temp_.clear();
}

std::string OutputFile::message() const {
  const char* why = std::strerror(error_);
  if (kind_ == Kind::kStdout) {
    return fmt::format("kvreplay: cannot write {} to standard output: {}", what_, why);
  }
  return fmt::format("kvreplay: cannot write {} {}: {}", what_, path_, why);
}

OutputSet::~OutputSet() {
  abandon();
}

bool FileIdentity::same_as(const FileIdentity& other) const {
  if (exists && other.exists) return device == other.device && inode == other.inode;
  if (!exists && !other.exists) return !new_path.empty() && new_path == other.new_path;
  return false;
}

void OutputSet::add_input(std::string name, const std::string& path) {
  record_input_path(path, name);
  Input input{std::move(name), path, {}};
  struct stat info {};
  const int status = path == "-" ? ::fstat(STDIN_FILENO, &info) : ::stat(path.c_str(), &info);
  if (status != 0 || !S_ISREG(info.st_mode)) return;
  input.identity = {true, info.st_dev, info.st_ino, {}};
  inputs_.push_back(std::move(input));
}

std::optional<std::string> OutputSet::replaces_input(const OutputFile& file,
                                                     const FileIdentity& identity) const {
  if (!identity.exists) return std::nullopt;
  const std::string label = file.flag_.empty() ? file.what_ : file.flag_;
  auto refusal = [&](const std::string& input) {
    return fmt::format(
        "command line: {} {} is {}: an output never replaces an input (nothing written)", label,
        file.path_, input);
  };
  for (const Input& input : inputs_) {
    if (identity.same_as(input.identity)) return refusal(input.name + " " + input.path);
  }
  // Every file the run has opened for reading, wherever its path came from.
  if (auto input = find_input(identity.device, identity.inode)) {
    return refusal(input->name.empty() ? fmt::format("{}, which this run reads", input->path)
                                       : input->name + " " + input->path);
  }
  return std::nullopt;
}

OutputFile* OutputSet::open(std::string what, const std::string& path, OutputFile::Flow flow,
                            std::string flag) {
  std::unique_ptr<OutputFile> file(new OutputFile(std::move(what), path, flow));
  file->flag_ = std::move(flag);
  if (path.empty()) {
    error_ = fmt::format("command line: {}: an empty path names no file (- is standard output)",
                         file->flag_.empty() ? file->what_ : file->flag_);
    return nullptr;
  }
  Target target;
  if (int error = resolve(path, target); error != 0) {
    file->fail(error);
    error_ = file->message();
    return nullptr;
  }
  if (auto refusal = replaces_input(*file, target.identity)) {
    error_ = std::move(*refusal);
    return nullptr;
  }
  for (const auto& other : files_) {
    if (target.kind == Target::Kind::kStdout && other->is_stdout()) {
      error_ = fmt::format("command line: {} and {} both write to standard output", other->what_,
                           file->what_);
      return nullptr;
    }
    if (target.identity.known() && target.identity.same_as(other->identity_)) {
      error_ = other->flag_.empty() || file->flag_.empty()
                   ? fmt::format("command line: {} and {} both write to {}", other->what_,
                                 file->what_, path)
                   : fmt::format("command line: {} {} and {} {} are one file (nothing written)",
                                 other->flag_, other->path_, file->flag_, path);
      return nullptr;
    }
  }
  file->target_ = target.path;
  file->identity_ = target.identity;
  switch (target.kind) {
    case Target::Kind::kStdout:
      file->kind_ = OutputFile::Kind::kStdout;
      file->fd_ = STDOUT_FILENO;
      break;
    case Target::Kind::kInPlace: {
      file->kind_ = OutputFile::Kind::kInPlace;
      const int flags = O_WRONLY | O_CLOEXEC | O_NOCTTY | (target.append ? O_APPEND : 0);
      do {
        file->fd_ = ::open(target.path.c_str(), flags);
      } while (file->fd_ < 0 && errno == EINTR);
      if (file->fd_ < 0) file->fail(errno);
      break;
    }
    case Target::Kind::kTemporary: {
      file->kind_ = OutputFile::Kind::kTemporary;
      const mode_t mode = target.exists ? (target.info.st_mode & 07777) : (0666 & ~process_umask());
      // An unnamed file first: nothing to leave behind until commit.
      file->fd_ = ::open(parent_of(target.path).c_str(), O_TMPFILE | O_WRONLY | O_CLOEXEC, 0600);
      if (file->fd_ >= 0) {
        file->unnamed_ = true;
      } else if (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL) {
        // No O_TMPFILE on this file system: a named temporary.
        std::string name = base_of(target.path).size() + kTempSuffix.size() <= NAME_MAX
                               ? target.path + std::string(kTempSuffix)
                               : parent_of(target.path) + "/.kvreplay" + std::string(kTempSuffix);
        BlockedSignals blocked;  // created and registered, or neither, when a signal comes
        file->fd_ = ::mkostemp(name.data(), O_CLOEXEC);
        if (file->fd_ < 0) {
          file->fail(errno);
          break;
        }
        file->slot_ = register_temporary(name.c_str());
        if (file->slot_ < 0) {
          ::unlink(name.c_str());
          file->fail(ENAMETOOLONG);
          break;
        }
        file->temp_ = std::move(name);
      } else {
        file->fail(errno);
        break;
      }
      if (target.exists &&
          (target.info.st_uid != ::geteuid() || target.info.st_gid != ::getegid()) &&
          ::fchown(file->fd_, target.info.st_uid, target.info.st_gid) != 0) {
        // Not allowed (not root): the new file is ours, as a fresh copy would be.
      }
      if (::fchmod(file->fd_, mode) != 0) file->fail(errno);
      break;
    }
  }
  if (file->failed()) {
    error_ = file->message();
    return nullptr;  // `file` removes its temporary
  }
  files_.push_back(std::move(file));
  return files_.back().get();
}

bool OutputSet::writes_stdout() const {
  for (const auto& file : files_) {
    if (file->is_stdout()) return true;
  }
  return false;
}

bool OutputSet::failed() const {
  for (const auto& file : files_) {
    if (file->failed()) return true;
  }
  return false;
}

bool OutputSet::commit() {
  using Kind = OutputFile::Kind;
  auto give_up = [this](const OutputFile& file) {
    error_ = file.message();
    abandon();
    return false;
  };
  for (const auto& file : files_) {
    if (file->failed()) return give_up(*file);
  }
  // An input read since the output was opened (a path named inside another
  // input) is checked now, before any byte reaches anything.
  for (const auto& file : files_) {
    if (file->kind_ != Kind::kTemporary) continue;
    std::optional<std::string> refusal = replaces_input(*file, file->identity_);
    struct stat info {};
    if (!refusal && ::stat(file->target_.c_str(), &info) == 0 && S_ISREG(info.st_mode)) {
      refusal = replaces_input(*file, FileIdentity{true, info.st_dev, info.st_ino, {}});
    }
    if (refusal) {
      error_ = std::move(*refusal);
      abandon();
      return false;
    }
  }
  // Temporaries first, then devices and FIFOs, standard output last: what
  // cannot be taken back is written only once everything else succeeded.
  for (Kind kind : {Kind::kTemporary, Kind::kInPlace, Kind::kStdout}) {
    for (const auto& file : files_) {
      if (file->kind_ != kind) continue;
      file->flush();
      if (file->unnamed_ && !file->failed() && !file->link_temporary()) return give_up(*file);
      if (!file->close_descriptor()) return give_up(*file);
    }
  }
  BlockedSignals blocked;
  for (const auto& file : files_) {
    if (file->kind_ != Kind::kTemporary) continue;
    if (::rename(file->temp_.c_str(), file->target_.c_str()) != 0) {
      file->fail(errno);
      return give_up(*file);
    }
    release_temporary(file->slot_);
    file->slot_ = -1;
    file->temp_.clear();
  }
  files_.clear();
  return true;
}

void OutputSet::abandon() {
  files_.clear();
}

std::string OutputSet::error() const {
  if (!error_.empty()) return error_;
  for (const auto& file : files_) {
    if (file->failed()) return file->message();
  }
  return {};
}

}  // namespace kvreplay

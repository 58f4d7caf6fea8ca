// io/output.h and io/temporaries.h: what each kind of path becomes, the
// all-or-nothing commit of a set, and that no temporary outlives a failure or
// a signal.
//
// Device nodes are made with mknod in the test's own folder when that is
// allowed (as root), so a regression can never replace the system's /dev/null
// or /dev/full; without mknod, /dev/null and /dev/full are used only when not
// root (nobody else can replace them).
#include "io/output.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "io/byte_source.h"
#include "io/input_registry.h"
#include "io/temporaries.h"

namespace {

namespace fs = std::filesystem;
using kvreplay::OutputFile;
using kvreplay::OutputSet;

// A fresh, empty folder for one test, removed afterwards.
struct TempDir {
  fs::path path;
  TempDir() {
    static int counter = 0;
    path = fs::temp_directory_path() /
           ("kvreplay_io_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add);
    fs::remove_all(path);
    kvreplay::forget_inputs();  // the inodes of its files may be reused
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // The names in the folder, sorted.
  std::set<std::string> names() const {
    std::set<std::string> out;
    for (const auto& entry : fs::directory_iterator(path)) {
      out.insert(entry.path().filename().string());
    }
    return out;
  }
};

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_all(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

mode_t mode_of(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return info.st_mode & 07777;
}

bool is_link(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISLNK(info.st_mode);
}

bool is_char_device(const std::string& path) {
  struct stat info {};
  return ::lstat(path.c_str(), &info) == 0 && S_ISCHR(info.st_mode);
}

mode_t current_umask() {
  const mode_t mask = ::umask(022);
  ::umask(mask);
  return mask;
}

// A character device node like /dev/null (1, 3) or /dev/full (1, 7), made in
// `dir`; the system's own when mknod is not allowed and we are not root; ""
// when neither is safe.
std::string device_node(const TempDir& dir, const std::string& name, unsigned minor,
                        const std::string& system_path) {
  const std::string path = dir.file(name);
  if (::mknod(path.c_str(), S_IFCHR | 0666, makedev(1, minor)) == 0) return path;
  if (::geteuid() != 0) return system_path;
  return "";
}

// Runs `body` in a child process; returns its wait status.
template <class Body>
int in_child(Body&& body) {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int code = 100;
    try {
      code = body();
    } catch (...) {
    }
    ::_exit(code);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  return status;
}

}  // namespace

TEST_CASE("a new path is written through a temporary that commit renames") {
  TempDir dir;
  const std::string target = dir.file("out.json");
  OutputSet set;
  OutputFile* out = set.open("the report", target);
  REQUIRE(out != nullptr);
  CHECK_FALSE(out->is_stdout());
  out->write("{}\n");
  // Until commit, the file has no name (O_TMPFILE): nothing is beside the target.
  CHECK(dir.names().empty());
  REQUIRE(set.commit());
  CHECK(dir.names() == std::set<std::string>{"out.json"});
  CHECK(read_all(target) == "{}\n");
  CHECK(mode_of(target) == (0666 & ~current_umask()));
}

TEST_CASE("an existing file keeps its permission bits and is replaced whole") {
  TempDir dir;
  const std::string target = dir.file("out.json");
  write_all(target, "an older and longer report\n");
  REQUIRE(::chmod(target.c_str(), 0640) == 0);
  OutputSet set;
  OutputFile* out = set.open("the report", target);
  REQUIRE(out != nullptr);
  out->write("new\n");
  CHECK(read_all(target) == "an older and longer report\n");  // untouched until commit
  REQUIRE(set.commit());
  CHECK(read_all(target) == "new\n");
  CHECK(mode_of(target) == 0640);
  CHECK(dir.names() == std::set<std::string>{"out.json"});
}

TEST_CASE("a symlink is followed and the link stays a link") {
  TempDir dir;
  fs::create_directories(dir.path / "real");
  const std::string target = dir.file("real/report.json");
  write_all(target, "old\n");
  REQUIRE(::chmod(target.c_str(), 0600) == 0);
  // link -> middle -> real/report.json: a chain, one link relative to its folder.
  REQUIRE(::symlink("real/report.json", dir.file("middle").c_str()) == 0);
  REQUIRE(::symlink(dir.file("middle").c_str(), dir.file("link").c_str()) == 0);
  OutputSet set;
  OutputFile* out = set.open("the report", dir.file("link"));
  REQUIRE(out != nullptr);
  out->write("new\n");
  // The unnamed temporary is made in the target's folder (the rename stays on
  // one file system), and has no name there until commit.
  CHECK(std::distance(fs::directory_iterator(dir.path / "real"), fs::directory_iterator()) == 1);
  REQUIRE(set.commit());
  CHECK(is_link(dir.file("link")));
  CHECK(is_link(dir.file("middle")));
  CHECK(read_all(target) == "new\n");
  CHECK(mode_of(target) == 0600);
  CHECK(dir.names() == std::set<std::string>{"link", "middle", "real"});
  CHECK(std::distance(fs::directory_iterator(dir.path / "real"), fs::directory_iterator()) == 1);
}

TEST_CASE("a dangling symlink gets its target written") {
  TempDir dir;
  REQUIRE(::symlink("made.json", dir.file("link").c_str()) == 0);
  OutputSet set;
  OutputFile* out = set.open("the report", dir.file("link"));
  REQUIRE(out != nullptr);
  out->write("made\n");
  REQUIRE(set.commit());
  CHECK(is_link(dir.file("link")));
  CHECK(read_all(dir.file("made.json")) == "made\n");
  CHECK(dir.names() == std::set<std::string>{"link", "made.json"});
}

TEST_CASE("a symlink loop is refused") {
  TempDir dir;
  REQUIRE(::symlink("b", dir.file("a").c_str()) == 0);
  REQUIRE(::symlink("a", dir.file("b").c_str()) == 0);
  OutputSet set;
  CHECK(set.open("the report", dir.file("a")) == nullptr);
  CHECK(set.error() ==
        "kvreplay: cannot write the report " + dir.file("a") + ": " + std::strerror(ELOOP));
  CHECK(dir.names() == std::set<std::string>{"a", "b"});
}

TEST_CASE("a FIFO is written in place") {
  TempDir dir;
  const std::string fifo = dir.file("pipe");
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  std::string received;
  std::thread reader([&] { received = read_all(fifo); });
  {
    OutputSet set;
    OutputFile* out = set.open("the timeline", fifo, OutputFile::Flow::kStream);
    REQUIRE(out != nullptr);
    for (int i = 0; i < 20000; ++i) out->print("row {}\n", i);  // more than one pipe buffer
    CHECK(set.commit());
  }
  reader.join();
  std::string expected;
  for (int i = 0; i < 20000; ++i) expected += "row " + std::to_string(i) + "\n";
  CHECK(received == expected);
  struct stat info {};
  REQUIRE(::lstat(fifo.c_str(), &info) == 0);
  CHECK(S_ISFIFO(info.st_mode));
  CHECK(dir.names() == std::set<std::string>{"pipe"});
}

TEST_CASE("a null device is written in place and stays a device") {
  TempDir dir;
  const std::string null = device_node(dir, "null", 3, "/dev/null");
  if (null.empty()) {
    WARN("skipped: root without mknod; /dev/null itself is not risked");
    return;
  }
  OutputSet set;
  OutputFile* out = set.open("the report", null);
  REQUIRE(out != nullptr);
  out->write("{}\n");
  CHECK(set.commit());
  CHECK(is_char_device(null));
  if (null.rfind(dir.path.string(), 0) == 0) CHECK(dir.names() == std::set<std::string>{"null"});
}

TEST_CASE("a full device is written in place and its error is reported") {
  TempDir dir;
  const std::string full = device_node(dir, "full", 7, "/dev/full");
  if (full.empty()) {
    WARN("skipped: root without mknod; /dev/full itself is not risked");
    return;
  }
  OutputSet set;
  OutputFile* out = set.open("the report", full);
  REQUIRE(out != nullptr);
  out->write("{}\n");
  CHECK_FALSE(set.commit());
  CHECK(set.error() == "kvreplay: cannot write the report " + full + ": " + std::strerror(ENOSPC));
  CHECK(is_char_device(full));
  if (full.rfind(dir.path.string(), 0) == 0) CHECK(dir.names() == std::set<std::string>{"full"});
}

TEST_CASE("a folder that does not exist is reported when the output is opened") {
  TempDir dir;
  const std::string target = dir.file("missing/out.json");
  OutputSet set;
  CHECK(set.open("the report", target) == nullptr);
  CHECK(set.error() ==
        "kvreplay: cannot write the report " + target + ": " + std::strerror(ENOENT));
  CHECK(dir.names().empty());
}

TEST_CASE("a folder that may not be written is reported when the output is opened") {
  TempDir dir;
  fs::create_directories(dir.path / "locked");
  REQUIRE(::chmod(dir.file("locked").c_str(), 0500) == 0);
  const std::string target = dir.file("locked/out.json");
  const std::string expected =
      "kvreplay: cannot write the report " + target + ": " + std::strerror(EACCES);
  // Root may write any folder: as root the open runs in a child that is nobody.
  const int status = in_child([&] {
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) return 3;
    OutputSet set;
    if (set.open("the report", target) != nullptr) return 1;
    return set.error() == expected ? 0 : 2;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);  // 1: opened; 2: another message; 3: could not drop root
  CHECK(fs::is_empty(dir.path / "locked"));
}

TEST_CASE("a path below a file or naming a folder is refused") {
  TempDir dir;
  write_all(dir.file("plain"), "x");
  OutputSet set;
  CHECK(set.open("the report", dir.file("plain/out.json")) == nullptr);
  CHECK(set.error() == "kvreplay: cannot write the report " + dir.file("plain/out.json") + ": " +
                           std::strerror(ENOTDIR));
  CHECK(set.open("the report", dir.path.string()) == nullptr);
  CHECK(set.error() ==
        "kvreplay: cannot write the report " + dir.path.string() + ": " + std::strerror(EISDIR));
  CHECK(dir.names() == std::set<std::string>{"plain"});
}

TEST_CASE("a set commits all or nothing") {
  TempDir dir;
  const std::string full = device_node(dir, "full", 7, "/dev/full");
  if (full.empty()) {
    WARN("skipped: root without mknod; /dev/full itself is not risked");
    return;
  }
  const std::string kept = dir.file("kept.json");
  write_all(kept, "the previous run\n");
  {
    OutputSet set;
    OutputFile* first = set.open("the report", dir.file("new.json"));
    OutputFile* second = set.open("the timeline", kept, OutputFile::Flow::kStream);
    OutputFile* third = set.open("the HTML report", full);
    REQUIRE(first != nullptr);
    REQUIRE(second != nullptr);
    REQUIRE(third != nullptr);
    first->write("{}\n");
    second->write("a,b\n");
    third->write("<html>\n");
    CHECK_FALSE(set.commit());
    CHECK(set.error() ==
          "kvreplay: cannot write the HTML report " + full + ": " + std::strerror(ENOSPC));
    // Nothing renamed, no temporary left, before the set is even destroyed.
    std::set<std::string> expected{"kept.json"};
    if (full.rfind(dir.path.string(), 0) == 0) expected.insert("full");
    CHECK(dir.names() == expected);
  }
  CHECK(read_all(kept) == "the previous run\n");
}

TEST_CASE("an abandoned set removes every temporary") {
  TempDir dir;
  {
    OutputSet set;
    REQUIRE(set.open("the report", dir.file("a.json")) != nullptr);
    OutputFile* timeline = set.open("the timeline", dir.file("b.csv"), OutputFile::Flow::kStream);
    REQUIRE(timeline != nullptr);
    for (int i = 0; i < 20000; ++i) timeline->print("{}\n", i);  // streamed into its temporary
    CHECK(dir.names().empty());                                  // unnamed temporaries
  }
  CHECK(dir.names().empty());
}

TEST_CASE("a write error on a regular file is caught and its temporary removed") {
  TempDir dir;
  // A file size limit makes write() fail with EFBIG, as a full disk fails with ENOSPC.
  const int status = in_child([&] {
    ::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {};
    limit.rlim_cur = limit.rlim_max = 4096;
    if (::setrlimit(RLIMIT_FSIZE, &limit) != 0) return 10;
    OutputSet set;
    OutputFile* report = set.open("the report", dir.file("small.json"));
    OutputFile* timeline = set.open("the timeline", dir.file("big.csv"), OutputFile::Flow::kStream);
    if (report == nullptr || timeline == nullptr) return 11;
    report->write("{}\n");
    for (int i = 0; i < 100000 && !timeline->failed(); ++i) timeline->print("{}\n", i);
    if (!timeline->failed() || !set.failed()) return 12;  // seen while streaming
    if (set.commit()) return 13;
    if (set.error() != "kvreplay: cannot write the timeline " + dir.file("big.csv") + ": " +
                           std::strerror(EFBIG)) {
      return 14;
    }
    return 0;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(dir.names().empty());
}

TEST_CASE("two outputs on standard output are refused") {
  OutputSet set;
  OutputFile* out = set.open("the report", "-");
  REQUIRE(out != nullptr);
  CHECK(out->is_stdout());
  CHECK(set.writes_stdout());
  CHECK(set.open("the timeline", "-") == nullptr);
  CHECK(set.error() == "command line: the report and the timeline both write to standard output");
}

TEST_CASE("two outputs on one file are refused") {
  TempDir dir;
  REQUIRE(::symlink("out.json", dir.file("link").c_str()) == 0);
  OutputSet set;
  REQUIRE(set.open("the report", dir.file("out.json")) != nullptr);
  CHECK(set.open("the HTML report", dir.file("link")) == nullptr);
  CHECK(set.error() ==
        "command line: the report and the HTML report both write to " + dir.file("link"));
  set.abandon();
  CHECK(dir.names() == std::set<std::string>{"link"});
}

TEST_CASE("two paths of one file are one output, however they are spelled") {
  TempDir dir;
  fs::create_directories(dir.path / "out");
  OutputSet set;
  REQUIRE(set.open("the request times", dir.file("out/y.csv"), OutputFile::Flow::kWhole,
                   "--requests") != nullptr);
  // Not made yet: the folder resolved tells them apart from each other.
  CHECK(set.open("the report", dir.file("out/./y.csv"), OutputFile::Flow::kWhole, "--report") ==
        nullptr);
  CHECK(set.error() == "command line: --requests " + dir.file("out/y.csv") + " and --report " +
                           dir.file("out/./y.csv") + " are one file (nothing written)");
  CHECK(set.open("the HTML report", dir.file("out/../out/y.csv"), OutputFile::Flow::kWhole,
                 "--html") == nullptr);
  set.abandon();
  CHECK(dir.names() == std::set<std::string>{"out"});
  // Existing: a hard link is the same device and inode.
  write_all(dir.file("a.json"), "old\n");
  REQUIRE(::link(dir.file("a.json").c_str(), dir.file("b.json").c_str()) == 0);
  OutputSet linked;
  REQUIRE(linked.open("the report", dir.file("a.json"), OutputFile::Flow::kWhole, "--report") !=
          nullptr);
  CHECK(linked.open("the timeline", dir.file("b.json"), OutputFile::Flow::kWhole, "--timeline") ==
        nullptr);
  linked.abandon();
  CHECK(read_all(dir.file("a.json")) == "old\n");
}

TEST_CASE("an output that is an input is refused before anything is written") {
  TempDir dir;
  write_all(dir.file("a.csv"), "the trace\n");
  REQUIRE(::symlink("a.csv", dir.file("link.csv").c_str()) == 0);
  REQUIRE(::link(dir.file("a.csv").c_str(), dir.file("hard.csv").c_str()) == 0);
  fs::create_directories(dir.path / "sub");
  for (const std::string& spelled : {dir.file("a.csv"), dir.file("link.csv"), dir.file("hard.csv"),
                                     dir.file("sub/../a.csv"), dir.file("./a.csv")}) {
    INFO(spelled);
    OutputSet set;
    set.add_input("REQUESTS", dir.file("a.csv"));
    CHECK(set.open("the report", spelled, OutputFile::Flow::kWhole, "--report") == nullptr);
    CHECK(set.error() == "command line: --report " + spelled + " is REQUESTS " + dir.file("a.csv") +
                             ": an output never replaces an input (nothing written)");
  }
  CHECK(read_all(dir.file("a.csv")) == "the trace\n");
  CHECK(dir.names() == std::set<std::string>{"a.csv", "hard.csv", "link.csv", "sub"});
  // Another file, and a device twice, are fine.
  OutputSet set;
  set.add_input("REQUESTS", dir.file("a.csv"));
  CHECK(set.open("the report", dir.file("r.json")) != nullptr);
  if (fs::exists("/dev/null")) {
    CHECK(set.open("the timeline", "/dev/null") != nullptr);
    CHECK(set.open("the HTML report", "/dev/null") != nullptr);
  }
}

TEST_CASE("a file read after the output was opened is refused when the set commits") {
  TempDir dir;
  write_all(dir.file("cfg.json"), "{}\n");
  write_all(dir.file("prof.json"), "{\"profiles\": []}\n");
  for (const std::string& target : {dir.file("cfg.json"), dir.file("prof.json")}) {
    INFO(target);
    OutputSet set;
    OutputFile* report =
        set.open("the report", dir.file("r.json"), OutputFile::Flow::kWhole, "--report");
    OutputFile* results = set.open("the results", target, OutputFile::Flow::kWhole, "--results");
    REQUIRE(report != nullptr);
    REQUIRE(results != nullptr);  // not read yet: nothing to refuse
    // Read through a hard link: the same file by identity.
    const std::string link = dir.file("link");
    fs::remove(link);
    REQUIRE(::link(target.c_str(), link.c_str()) == 0);
    auto source = kvreplay::ByteSource::open(link);
    REQUIRE(static_cast<bool>(source));
    report->write("report\n");
    results->write("results\n");
    CHECK_FALSE(set.commit());
    CHECK(set.error() == "command line: --results " + target + " is " + link +
                             ", which this run reads: an output never replaces an input "
                             "(nothing written)");
    fs::remove(link);
  }
  // Nothing was renamed: neither the input nor the other output.
  CHECK(read_all(dir.file("cfg.json")) == "{}\n");
  CHECK(read_all(dir.file("prof.json")) == "{\"profiles\": []}\n");
  CHECK(dir.names() == std::set<std::string>{"cfg.json", "prof.json"});
  // A name given by the command (add_input) is the one the message uses.
  OutputSet named;
  named.add_input("--cost-profile", dir.file("prof.json"));
  CHECK(named.open("the report", dir.file("prof.json"), OutputFile::Flow::kWhole, "--report") ==
        nullptr);
  CHECK(named.error().find("is --cost-profile " + dir.file("prof.json")) != std::string::npos);
}

TEST_CASE("standard input redirected from a file is that file") {
  TempDir dir;
  write_all(dir.file("a.csv"), "the trace\n");
  const int status = in_child([&] {
    const int fd = ::open(dir.file("a.csv").c_str(), O_RDONLY);
    if (fd < 0 || ::dup2(fd, STDIN_FILENO) < 0) return 10;
    OutputSet set;
    set.add_input("REQUESTS", "-");
    if (set.open("the report", dir.file("a.csv"), OutputFile::Flow::kWhole, "--report") != nullptr)
      return 11;
    return set.error().find("is REQUESTS -") != std::string::npos ? 0 : 12;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  CHECK(read_all(dir.file("a.csv")) == "the trace\n");
}

TEST_CASE("an empty output path is a usage error") {
  OutputSet set;
  CHECK(set.open("the report", "", OutputFile::Flow::kWhole, "--report") == nullptr);
  CHECK(set.error() ==
        "command line: --report: an empty path names no file (- is standard output)");
}

TEST_CASE("SIGKILL in the middle of a run leaves no temporary") {
  TempDir dir;
  write_all(dir.file("old.json"), "the previous run\n");
  const int status = in_child([&] {
    OutputSet set;
    OutputFile* report = set.open("the report", dir.file("old.json"));
    OutputFile* timeline = set.open("the timeline", dir.file("t.csv"), OutputFile::Flow::kStream);
    if (report == nullptr || timeline == nullptr) return 10;
    report->write("{}\n");
    for (int i = 0; i < 100000; ++i) timeline->print("{}\n", i);
    ::raise(SIGKILL);
    return 11;
  });
  REQUIRE(WIFSIGNALED(status));
  CHECK(WTERMSIG(status) == SIGKILL);
  CHECK(dir.names() == std::set<std::string>{"old.json"});
  CHECK(read_all(dir.file("old.json")) == "the previous run\n");
}

TEST_CASE("a link to the descriptor of standard output names standard output") {
  if (!fs::exists("/proc/self/fd/1")) {
    WARN("skipped: no /proc/self/fd");
    return;
  }
  // Where /dev/stdout leads; our own link, so a regression cannot replace /dev/stdout.
  TempDir dir;
  REQUIRE(::symlink("/proc/self/fd/1", dir.file("stdout").c_str()) == 0);
  OutputSet set;
  OutputFile* out = set.open("the report", dir.file("stdout"));
  REQUIRE(out != nullptr);
  CHECK(out->is_stdout());
  CHECK(set.open("the timeline", "-") == nullptr);
}

TEST_CASE("the registry unlinks every registered temporary") {
  TempDir dir;
  write_all(dir.file("a.tmp"), "a");
  write_all(dir.file("b.tmp"), "b");
  write_all(dir.file("released.tmp"), "c");
  const int a = kvreplay::register_temporary(dir.file("a.tmp").c_str());
  const int b = kvreplay::register_temporary(dir.file("b.tmp").c_str());
  const int released = kvreplay::register_temporary(dir.file("released.tmp").c_str());
  REQUIRE(a >= 0);
  REQUIRE(b >= 0);
  REQUIRE(released >= 0);
  kvreplay::release_temporary(released);
  kvreplay::remove_registered_temporaries();
  CHECK(dir.names() == std::set<std::string>{"released.tmp"});
  kvreplay::release_temporary(a);
  kvreplay::release_temporary(b);
  CHECK(kvreplay::register_temporary(std::string(kvreplay::kMaxTemporaryPath, 'x').c_str()) == -1);
}

TEST_CASE("a signal removes every temporary and ends the process by that signal") {
  for (int signal_number : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) {
    TempDir dir;
    write_all(dir.file("old.json"), "the previous run\n");
    const int status = in_child([&] {
      kvreplay::install_signal_cleanup();
      OutputSet set;
      OutputFile* report = set.open("the report", dir.file("old.json"));
      OutputFile* timeline = set.open("the timeline", dir.file("t.csv"), OutputFile::Flow::kStream);
      if (report == nullptr || timeline == nullptr) return 10;
      report->write("{}\n");
      timeline->write("a,b\n");
      ::raise(signal_number);
      return 11;  // not reached: the signal ends the process
    });
    INFO("signal " << signal_number);
    REQUIRE(WIFSIGNALED(status));
    CHECK(WTERMSIG(status) == signal_number);
    CHECK(dir.names() == std::set<std::string>{"old.json"});
    CHECK(read_all(dir.file("old.json")) == "the previous run\n");
  }
}

TEST_CASE("a signal ignored at start stays ignored") {
  const int status = in_child([] {
    ::signal(SIGHUP, SIG_IGN);  // as nohup leaves it
    kvreplay::install_signal_cleanup();
    ::raise(SIGHUP);
    return 0;
  });
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

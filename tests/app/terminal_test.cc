// Progress (app/terminal.h): on a terminal, the percentage and an ETA beside the
// caller's text once the fraction is known; in a log, one plain line a step of
// 10%, only after kLogDelay; the input's read offset as the fraction. A fake
// clock: nothing here depends on the machine's speed.
#include "app/terminal.h"

#include <unistd.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <optional>
#include <string>

namespace {

using kvreplay::ProgressLine;
using Clock = ProgressLine::Clock;

// What `file` holds, from its start.
std::string contents(std::FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string out;
  char buffer[256];
  std::size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file)) > 0) out.append(buffer, n);
  return out;
}

struct Fake {
  Clock::time_point now{};
  std::optional<double> fraction;

  void attach(ProgressLine& progress) {
    progress.set_clock([this] { return now; });
    progress.set_fraction([this] { return fraction; });
  }
};

}  // namespace

TEST_CASE("progress on a terminal: percentage and ETA once the fraction is known") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  Fake fake;
  {
    ProgressLine progress(out, 1, ProgressLine::Style::kTerminal);
    fake.attach(progress);
    CHECK_FALSE(progress.due());  // nothing before kProgressDelay
    fake.now += std::chrono::seconds(2);
    REQUIRE(progress.due());
    progress.draw("replay: 10 events");  // no fraction (a pipe): the text alone
    fake.fraction = 0.25;                // 2 s for a quarter: 6 s left
    fake.now += std::chrono::milliseconds(100);
    CHECK_FALSE(progress.due());  // at most one redraw per kProgressInterval
    fake.now += std::chrono::milliseconds(100);
    REQUIRE(progress.due());
    progress.draw("replay: 20 events");
    fake.fraction = 0.01;  // 2.2 s for 1%: 3.6 min left
    progress.draw("replay: 30 events");
    fake.fraction = 1.0;  // all read, still running: never 100%, no ETA
    progress.draw("replay: 40 events");
  }
  CHECK(contents(out) ==
        "\rreplay: 10 events"
        "\rreplay: 20 events, 25%, ETA 7 s"
        "\rreplay: 30 events, 1%, ETA 3.6 min"
        "\rreplay: 40 events, 99%" +
            std::string(12, ' ') +  // blanks what line 3 left
            "\r" + std::string(22, ' ') + "\r");
  std::fclose(out);
}

TEST_CASE("progress in a log: a line a step of 10%, only once the run is long") {
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  Fake fake;
  {
    ProgressLine progress(out, 1, ProgressLine::Style::kLog);
    fake.attach(progress);
    fake.fraction = 0.05;
    fake.now += std::chrono::seconds(9);
    CHECK_FALSE(progress.due());  // a run shorter than kLogDelay prints nothing
    fake.now += std::chrono::seconds(1);
    REQUIRE(progress.due());
    progress.draw("simulate: 5 requests");  // 5%: below the first step
    fake.fraction = 0.37;
    progress.draw("simulate: 37 requests");
    fake.fraction = 0.39;
    progress.draw("simulate: 39 requests");  // the same step: no line
    fake.fraction = 0.40;
    fake.now += std::chrono::seconds(5);
    progress.draw("simulate: 40 requests");
    fake.fraction = std::nullopt;
    progress.draw("simulate: 41 requests");  // unknown: no line
    fake.fraction = 1.0;
    progress.draw("simulate: 100 requests");
    progress.clear();  // nothing to erase in a log
  }
  CHECK(contents(out) ==
        "kvreplay simulate: 37 requests, 37%, ETA 17 s\n"
        "kvreplay simulate: 40 requests, 40%, ETA 22 s\n"
        "kvreplay simulate: 100 requests, 99%\n");
  std::fclose(out);
}

TEST_CASE("progress: the fraction is the watched file's read offset") {
  char name[] = "/tmp/kvreplay_terminal_test_XXXXXX";
  const int fd = ::mkstemp(name);
  REQUIRE(fd >= 0);
  REQUIRE(::write(fd, "0123456789", 10) == 10);
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  {
    ProgressLine progress(out, 1, ProgressLine::Style::kLogNow);
    progress.watch_input(name);  // found among the open descriptors: fd
    REQUIRE(::lseek(fd, 3, SEEK_SET) == 3);
    REQUIRE(progress.due());  // from the start, every call
    progress.draw("read");
    REQUIRE(::lseek(fd, 10, SEEK_SET) == 10);
    progress.draw("read");
  }
  const std::string text = contents(out);
  CHECK(text.rfind("kvreplay read, 30%, ETA ", 0) == 0);
  CHECK(text.find("\nkvreplay read, 99%\n") != std::string::npos);
  ::close(fd);
  ::unlink(name);
  std::fclose(out);
}

TEST_CASE("progress: the ETA in whole seconds, then minutes and hours") {
  CHECK(kvreplay::eta_text(0.2) == "0 s");
  CHECK(kvreplay::eta_text(59.4) == "59 s");
  CHECK(kvreplay::eta_text(59.6) == "1.0 min");
  CHECK(kvreplay::eta_text(9840.0) == "2.7 h");
}

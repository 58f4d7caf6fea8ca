// Lineage: which writer wrote each position of a table, as runs of positions.
//
// Every table (sequence or prefix) is given a fresh writer number when it is
// created, and its own appends are attributed to that writer. A fork copies the
// parent's runs and a prefix install the prefix's, so the bytes a position must
// hold are content(writer of its run, position, ...) however often the page
// holding it was shared or copied. Writer numbers are never reused, so a
// sequence id reused after a free cannot match a stale page by accident.
//
// Invariant: runs are sorted, non-empty, contiguous from 0 to length(), and two
// neighbouring runs never have the same writer.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace kvreplay {

struct WriterRun {
  std::uint32_t begin = 0;  // first position
  std::uint32_t end = 0;    // one past the last
  std::uint32_t writer = 0;
  bool operator==(const WriterRun&) const = default;
};

class Lineage {
 public:
  // An empty table whose writes belong to `writer` (>= 1).
  explicit Lineage(std::uint32_t writer) : writer_(writer) {}
  // A table that shares `source`'s first `length` positions (a fork: all of
  // them; a prefix install: the prefix) and then writes as `writer`.
  // REQUIRES: length <= source.length().
  Lineage(const Lineage& source, std::uint32_t length, std::uint32_t writer);

  // Positions [length(), length() + tokens) are written by own_writer().
  void append(std::uint32_t tokens);
  // Positions [length(), ...) hold what `runs` say (a page taken from the
  // prefix cache). REQUIRES: runs are contiguous, non-empty, and the first
  // begins at length().
  void adopt(std::span<const WriterRun> runs);
  // The runs of positions [begin, end), cut at both ends. REQUIRES: begin <
  // end <= length().
  std::vector<WriterRun> runs_between(std::uint32_t begin, std::uint32_t end) const;

  std::uint32_t own_writer() const { return writer_; }
  std::uint32_t length() const { return runs_.empty() ? 0 : runs_.back().end; }
  std::span<const WriterRun> runs() const { return runs_; }
  // The writer of `position`. REQUIRES: position < length().
  std::uint32_t writer_at(std::uint32_t position) const;

  // True when the invariant above holds.
  bool check() const;

 private:
  std::vector<WriterRun> runs_;
  std::uint32_t writer_;
};

}  // namespace kvreplay

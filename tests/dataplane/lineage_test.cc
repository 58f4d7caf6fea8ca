#include "dataplane/lineage.h"

#include <catch2/catch.hpp>

using namespace kvreplay;

TEST_CASE("a table's own appends form one run", "[lineage]") {
  Lineage lineage(3);
  CHECK(lineage.length() == 0);
  lineage.append(0);
  CHECK(lineage.runs().empty());
  lineage.append(5);
  lineage.append(2);
  REQUIRE(lineage.runs().size() == 1);
  CHECK(lineage.runs()[0] == WriterRun{0, 7, 3});
  CHECK(lineage.writer_at(6) == 3);
  CHECK(lineage.check());
}

TEST_CASE("forks and prefixes inherit runs, then write as themselves", "[lineage]") {
  Lineage prefix(1);
  prefix.append(10);
  Lineage seq(prefix, prefix.length(), 2);
  seq.append(4);
  REQUIRE(seq.runs().size() == 2);
  CHECK(seq.writer_at(9) == 1);
  CHECK(seq.writer_at(10) == 2);
  Lineage child(seq, seq.length(), 3);
  CHECK(child.length() == 14);
  child.append(1);
  CHECK(child.writer_at(0) == 1);
  CHECK(child.writer_at(13) == 2);
  CHECK(child.writer_at(14) == 3);
  CHECK(child.check());
  // The parent goes on writing as itself; the child's view is unchanged.
  seq.append(3);
  CHECK(seq.writer_at(16) == 2);
  CHECK(seq.runs().size() == 2);
  CHECK(child.runs().size() == 3);
  // A partial inheritance cuts the last run.
  Lineage part(seq, 12, 4);
  CHECK(part.length() == 12);
  CHECK(part.runs().back() == WriterRun{10, 12, 2});
  CHECK(part.check());
}

#include "dataplane/kernel_bench.h"

#include <unistd.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <set>

#include "support.h"

using namespace kvreplay;

TEST_CASE("the replayed tables are full, disjoint and fragmented", "[kernels-bench]") {
  for (std::uint32_t page_tokens : {1u, 3u, 16u, 64u}) {
    for (std::uint32_t batch : {1u, 5u, 32u}) {
      CAPTURE(page_tokens, batch);
      const std::uint32_t context = page_tokens == 64 ? 20 : 97;  // a page longer than the context
      PagedKvConfig geometry = test::geometry(1, 2, 8, Dtype::kBf16, page_tokens, 1, context);
      FragmentedTables tables = replay_fragmented_tables(geometry, batch, context, 1);
      const std::uint32_t pages = (context + page_tokens - 1) / page_tokens;
      REQUIRE(tables.tables.size() == batch);
      REQUIRE(tables.reserved_from + batch == tables.pool_blocks);
      std::set<BlockId> seen;
      std::uint64_t contiguous = 0, steps = 0;
      for (const auto& table : tables.tables) {
        REQUIRE(table.size() == pages);
        for (std::size_t page = 0; page < table.size(); ++page) {
          REQUIRE(table[page] < tables.reserved_from);
          REQUIRE(seen.insert(table[page]).second);
          if (page > 0) {
            ++steps;
            contiguous += table[page] == table[page - 1] + 1;
          }
        }
      }
      if (batch > 1 && steps > 0) CHECK(contiguous * 2 < steps);  // mostly scattered
    }
  }
}

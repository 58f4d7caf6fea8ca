// plan_fault: `kvreplay plan REQUESTS --kv-memory LIST --check CHECK -q` with a
// block leaked in some of its simulations (the real CLI has no way to plant a
// fault), for tests/cli/run_cli_tests.sh. Prints what kvreplay prints; returns
// its exit code.
//
// Usage: plan_fault REQUESTS KV_MEMORIES CHECK WHERE STEP [REPORT]
//   KV_MEMORIES  comma-separated, as --kv-memory
//   WHERE        the --kv-memory of the sweep points to plant in, or "search"
//                (the search for the smallest KV memory runs only then), or
//                "oom": every probe of the search, on two threads (page sizes
//                16 and 32, -j 2), throws std::bad_alloc
//   STEP         the step after which one more reference to a live block is taken
//   REPORT       --report (default: none)
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "app/plan/plan.h"

int main(int argc, char** argv) {
  if (argc != 6 && argc != 7) {
    std::fprintf(stderr, "usage: %s REQUESTS KV_MEMORIES CHECK WHERE STEP [REPORT]\n", argv[0]);
    return 2;
  }
  kvreplay::PlanRequest request;
  request.trace_path = argv[1];
  std::istringstream memories(argv[2]);
  for (std::string memory; std::getline(memories, memory, ',');) {
    request.kv_memories.push_back(memory);
  }
  auto check = kvreplay::CheckPolicy::parse(argv[3]);
  if (!check) {
    std::fprintf(stderr, "bad check policy %s\n", argv[3]);
    return 2;
  }
  request.options.check = *check;
  request.fault_kv_memory = argv[4];
  request.faults.leak_block_at_step = std::strtoull(argv[5], nullptr, 10);
  request.models = {"llama-3-8b"};
  request.page_tokens = {16};
  request.search_min = request.fault_kv_memory == "search";
  request.jobs = 1;
  if (request.fault_kv_memory == "oom") {
    request.fault_kv_memory.clear();
    request.fault_out_of_memory = true;
    request.search_min = true;
    request.page_tokens = {16, 32};
    request.jobs = 2;
  }
  if (argc == 7) request.report_path = argv[6];
  request.quiet = true;
  return kvreplay::run_plan(request);
}

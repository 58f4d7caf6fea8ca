// plan_fault: `kvreplay plan REQUESTS --kv-memory LIST --check CHECK -q` with a
// block leaked in some of its simulations (the real CLI has no way to plant a
// fault), for tests/cli/run_cli_tests.sh. Prints what kvreplay prints; returns
// its exit code.
//
// Usage: plan_fault REQUESTS KV_MEMORIES CHECK WHERE STEP
//   KV_MEMORIES  comma-separated, as --kv-memory
//   WHERE        the --kv-memory of the sweep points to plant in, or "search"
//                (the search for the smallest KV memory runs only then)
//   STEP         the step after which one more reference to a live block is taken
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "app/plan.h"

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: %s REQUESTS KV_MEMORIES CHECK WHERE STEP\n", argv[0]);
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
  request.quiet = true;
  return kvreplay::run_plan(request);
}

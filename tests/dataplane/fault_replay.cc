// dataplane_fault_replay: `kvreplay replay TRACE --backend cpu --verify` with a
// fault planted in the data plane, for the CLI tests (the real CLI has no way
// to plant one). Prints what kvreplay prints; returns its exit code.
//
// Usage: dataplane_fault_replay TRACE (--skip-copy N | --write-shared N)
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "app/replay.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s TRACE (--skip-copy N | --write-shared N)\n", argv[0]);
    return 2;
  }
  kvreplay::ReplayRequest request;
  request.trace_path = argv[1];
  request.check = kvreplay::CheckPolicy{kvreplay::CheckPolicy::Mode::kEnd, 1};
  request.dataplane.backend = kvreplay::BackendKind::kCpu;
  request.dataplane.options.verify = true;
  const std::uint64_t n = std::strtoull(argv[3], nullptr, 10);
  if (std::strcmp(argv[2], "--skip-copy") == 0) {
    request.dataplane.faults.skip_copy = n;
  } else if (std::strcmp(argv[2], "--write-shared") == 0) {
    request.dataplane.faults.write_shared = n;
  } else {
    std::fprintf(stderr, "unknown fault %s\n", argv[2]);
    return 2;
  }
  return kvreplay::run_replay(request);
}

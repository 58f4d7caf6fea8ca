// An input file read once a run, however often the run asks for it: plan
// resolves its options for every cell, calibrate for every workload, from
// several threads, and a FIFO, /dev/stdin or a pipe gives its bytes once.
// The first answer for a path (the value or the error) is kept and returned
// to every later caller; a path is the same file for the whole run.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace kvreplay {

// `read(path)` once per distinct `path` and `Tag`; later calls get a copy of
// the first answer. Thread-safe (the read runs under the lock).
template <class Tag, class Read>
auto read_once(const std::string& path, Read read) -> decltype(read(path)) {
  using Answer = decltype(read(path));
  static std::mutex mutex;
  static std::map<std::string, Answer> answers;
  std::lock_guard lock(mutex);
  auto it = answers.find(path);
  if (it == answers.end()) it = answers.emplace(path, read(path)).first;
  return it->second;
}

}  // namespace kvreplay

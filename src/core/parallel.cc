#include "core/parallel.h"

#include <algorithm>
#include <atomic>
#include <exception>
#include <mutex>
#include <new>
#include <system_error>
#include <thread>
#include <vector>

namespace kvreplay {

std::size_t jobs_at_once(std::size_t count, unsigned jobs) {
  return std::max<std::size_t>(1, std::min<std::size_t>(jobs, count));
}

void parallel_for(std::size_t count, unsigned jobs, const std::function<void(std::size_t)>& job) {
  std::atomic<std::size_t> next{0};
  std::mutex failure_mutex;
  std::exception_ptr failure;
  auto worker = [&]() noexcept {
    try {
      for (std::size_t i = next++; i < count; i = next++) job(i);
    } catch (...) {
      const std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
      next = count;
    }
  };
  const std::size_t threads = jobs_at_once(count, jobs);
  std::vector<std::thread> pool;
  try {
    pool.reserve(threads - 1);  // so that emplace_back below only fails to start a thread
    for (std::size_t t = 1; t < threads; ++t) pool.emplace_back(worker);
  } catch (const std::system_error&) {  // no more threads: the others take their jobs
  } catch (const std::bad_alloc&) {
  }
  worker();
  for (std::thread& thread : pool) thread.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace kvreplay

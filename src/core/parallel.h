// The one way kvreplay runs work on threads (plan's cells, searches and
// re-simulations; calibrate's workloads and its fit's error pass).
#pragma once

#include <cstddef>
#include <functional>

namespace kvreplay {

// How many of `count` jobs run at once with `-j jobs` (at least one).
std::size_t jobs_at_once(std::size_t count, unsigned jobs);

// Runs job(0) .. job(count - 1) on up to `jobs` threads, the calling one
// among them; job i writes only its own results. An exception in a job
// (std::bad_alloc, ...) stops the others from starting more jobs, and the
// first one thrown is rethrown here once every thread has joined: never
// std::terminate. A thread that cannot be started leaves its jobs to the others.
void parallel_for(std::size_t count, unsigned jobs, const std::function<void(std::size_t)>& job);

}  // namespace kvreplay

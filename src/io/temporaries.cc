#include "io/temporaries.h"

#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace kvreplay {

namespace {

static_assert(std::atomic<int>::is_always_lock_free, "the handler reads slot states");

// A slot's path is written only while its state is kFree and read by the
// handler only while it is kUsed.
constexpr int kFree = 0;
constexpr int kUsed = 1;

struct Slot {
  std::atomic<int> state{kFree};
  char path[kMaxTemporaryPath] = {};
};

Slot g_slots[kMaxTemporaries];

constexpr int kCaught[] = {SIGINT, SIGTERM, SIGHUP, SIGPIPE};

void on_signal(int signal_number) {
  remove_registered_temporaries();
  // Die of the same signal: it is blocked while its handler runs, so it is
  // delivered, with the default action, as soon as the handler returns.
  struct sigaction default_action {};
  default_action.sa_handler = SIG_DFL;
  sigemptyset(&default_action.sa_mask);
  sigaction(signal_number, &default_action, nullptr);
  raise(signal_number);
}

}  // namespace

int register_temporary(const char* path) {
  const std::size_t length = std::strlen(path);
  if (length >= kMaxTemporaryPath) return -1;
  for (std::size_t i = 0; i < kMaxTemporaries; ++i) {
    int expected = kFree;
    // kUsed + 1 reserves the slot while its path is written; the handler skips it.
    if (!g_slots[i].state.compare_exchange_strong(expected, kUsed + 1)) continue;
    std::memcpy(g_slots[i].path, path, length + 1);
    g_slots[i].state.store(kUsed);
    return static_cast<int>(i);
  }
  return -1;
}

void release_temporary(int slot) {
  if (slot < 0 || static_cast<std::size_t>(slot) >= kMaxTemporaries) return;
  g_slots[slot].state.store(kFree);
}

void remove_registered_temporaries() noexcept {
  for (Slot& slot : g_slots) {
    if (slot.state.load() == kUsed) unlink(slot.path);
  }
}

void install_signal_cleanup() {
  static std::atomic<bool> installed{false};
  if (installed.exchange(true)) return;
  for (int signal_number : kCaught) {
    struct sigaction current {};
    if (sigaction(signal_number, nullptr, &current) != 0) continue;
    if (current.sa_handler == SIG_IGN) continue;  // nohup, background jobs
    struct sigaction action {};
    action.sa_handler = on_signal;
    sigemptyset(&action.sa_mask);
    for (int other : kCaught) sigaddset(&action.sa_mask, other);
    action.sa_flags = SA_RESTART;
    sigaction(signal_number, &action, nullptr);
  }
}

BlockedSignals::BlockedSignals() {
  sigset_t blocked;
  sigemptyset(&blocked);
  for (int signal_number : kCaught) sigaddset(&blocked, signal_number);
  pthread_sigmask(SIG_BLOCK, &blocked, &previous_);
}

BlockedSignals::~BlockedSignals() {
  pthread_sigmask(SIG_SETMASK, &previous_, nullptr);
}

}  // namespace kvreplay

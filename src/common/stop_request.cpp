#include "bigbatch/common/stop_request.h"

#include <atomic>

namespace bigbatch {
namespace {

std::atomic<bool> requested{false};
static_assert(std::atomic<bool>::is_always_lock_free, "the signal handler needs a lock-free flag");

void noteRequest(int) { requested.store(true, std::memory_order_relaxed); }

}  // namespace

void armStopRequest() {
  struct sigaction note {};
  note.sa_handler = noteRequest;
  sigemptyset(&note.sa_mask);
  note.sa_flags = SA_RESTART;  // a read or wait it interrupts goes on
  sigaction(kStopSignal, &note, nullptr);
}

bool stopRequested() { return requested.load(std::memory_order_relaxed); }

void clearStopRequest() { requested.store(false, std::memory_order_relaxed); }

}  // namespace bigbatch

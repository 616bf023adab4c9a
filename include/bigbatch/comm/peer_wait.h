// PeerWait: how a thread idles while a peer rank has not yet done its part
// (a step counter in shared memory, an MPI request). Every poll loop of the
// collectives calls idle() once per unsuccessful poll.
//
// First it spins with the CPU's pause hint (a peer that is a few
// microseconds away is caught with no system call). Then it depends on the
// thread:
//  - the compute thread (the default) yields: it owns its core, and every
//    microsecond of its wait is exposed step time;
//  - a thread marked with setBackground(true) — the gradient exchange's
//    communication thread — sleeps, 5 µs at first and doubling up to
//    200 µs. On CPU training it shares its rank's core(s) with backward,
//    and a waiting loop that keeps yielding keeps taking the core back:
//    measured on 2 ranks × 1 thread, overlapping the exchange that way cost
//    2 % of the ResNet's throughput (docs/BENCHMARKS.md). A sleep overshoots
//    a late peer by at most its current step, hidden behind backward.
//
// Threading: the mark is per thread (thread_local); PeerWait objects are
// used by one thread.
#pragma once

#include <cstdint>

namespace bigbatch {

class PeerWait {
 public:
  // Polls that only spin before a wait starts yielding or sleeping.
  static constexpr uint64_t kSpinPolls = 256;

  // Marks the calling thread as a background thread (sleeps in long waits).
  static void setBackground(bool background);
  static bool background();

  // One unsuccessful poll: spin, then yield or sleep as above.
  void idle();
  // Unsuccessful polls so far.
  uint64_t polls() const { return polls_; }

 private:
  uint64_t polls_ = 0;
  uint32_t sleepUs_ = 0;
};

}  // namespace bigbatch

#include "bigbatch/comm/peer_wait.h"

#include <sched.h>

#include <algorithm>
#include <chrono>
#include <thread>

namespace bigbatch {
namespace {
thread_local bool tBackground = false;
constexpr uint32_t kFirstSleepUs = 5, kMaxSleepUs = 200;
}  // namespace

void PeerWait::setBackground(bool background) { tBackground = background; }
bool PeerWait::background() { return tBackground; }

void PeerWait::idle() {
  ++polls_;
  if (polls_ <= kSpinPolls) {  // about 10-20 µs of pause hints
    // `pause` tells the CPU (and a hypervisor's pause-loop exiting) that this
    // is a spin, so a sibling hyperthread or vCPU gets the core.
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
    return;
  }
  if (!tBackground) {
    sched_yield();  // oversubscribed ranks must let their peers run
    return;
  }
  sleepUs_ = sleepUs_ == 0 ? kFirstSleepUs : std::min(kMaxSleepUs, 2 * sleepUs_);
  std::this_thread::sleep_for(std::chrono::microseconds(sleepUs_));
}

}  // namespace bigbatch

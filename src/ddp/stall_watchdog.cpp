#include "bigbatch/ddp/stall_watchdog.h"

#include "bigbatch/common/clock.h"

namespace bigbatch {
StallWatchdog::StallWatchdog(std::chrono::milliseconds limit,
                             std::function<void(const std::string&, double)> onStall,
                             std::function<void()> onTick)
    : limit_(limit),
      onStall_(std::move(onStall)),
      onTick_(std::move(onTick)),
      thread_([this] { watch(); }) {}

StallWatchdog::~StallWatchdog() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StallWatchdog::watch() {
  const auto tick = std::min<std::chrono::milliseconds>(std::chrono::milliseconds(200), limit_);
  if (onTick_) onTick_();  // at once: the process is alive from the start
  std::unique_lock<std::mutex> lock(mutex_);
  while (!cv_.wait_for(lock, tick, [&] { return stop_; })) {
    if (onTick_) onTick_();
    for (int s = 0; s < kSlots; ++s) {
      const int64_t start = startNs_[s].load();
      if (start == 0) continue;
      const double stuck = static_cast<double>(steadyNowNs() - start) * 1e-9;
      if (stuck * 1e3 > static_cast<double>(limit_.count())) {
        const char* op = operation_[s].load();
        lock.unlock();
        onStall_(op ? op : "a collective", stuck);
        return;  // once
      }
    }
  }
}

StallWatchdog::Scope::Scope(StallWatchdog* w, Slot slot, const char* operation)
    : w_(w), slot_(slot) {
  if (!w_) return;
  w_->operation_[slot_].store(operation);
  w_->startNs_[slot_].store(steadyNowNs());
}

StallWatchdog::Scope::~Scope() {
  if (w_) w_->startNs_[slot_].store(0);
}

}  // namespace bigbatch

// StallWatchdog: ends a job whose communication has stopped moving.
//
// Our own collectives wait with a deadline and name the rank that did not
// answer; a call without one (MPI_Allreduce blocked on a rank that hangs in
// compute) would hang forever. Code that enters such a call marks it with a
// Scope; a watchdog thread calls `onStall(operation, seconds)` once when a
// marked call has run longer than the limit. The trainer's onStall prints
// the rank and operation and ends the process, and mpirun then ends the job.
// Its limit lies past the deadline of our own collectives, so they fail
// first with their own named error: the watchdog is the backstop.
// The thread also calls `onTick` every tick (0.2 s at most) while it runs —
// the heartbeat's pulse, which shows that the process is alive.
//
// Threading: Scopes may be opened from up to kSlots threads at once (each
// names its slot: the communication thread and the compute thread);
// onStall and onTick run on the watchdog thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace bigbatch {

class StallWatchdog {
 public:
  static constexpr int kSlots = 2;
  enum Slot { kCommThread = 0, kComputeThread = 1 };

  StallWatchdog(std::chrono::milliseconds limit,
                std::function<void(const std::string& operation, double seconds)> onStall,
                std::function<void()> onTick = nullptr);
  ~StallWatchdog();
  StallWatchdog(const StallWatchdog&) = delete;
  StallWatchdog& operator=(const StallWatchdog&) = delete;

  class Scope {
   public:
    // A null watchdog makes the scope a no-op.
    Scope(StallWatchdog* w, Slot slot, const char* operation);
    ~Scope();
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;

   private:
    StallWatchdog* w_;
    Slot slot_;
  };

  std::chrono::milliseconds limit() const { return limit_; }

 private:
  void watch();

  std::chrono::milliseconds limit_;
  std::function<void(const std::string&, double)> onStall_;
  std::function<void()> onTick_;
  std::atomic<int64_t> startNs_[kSlots] = {};        // 0: idle
  std::atomic<const char*> operation_[kSlots] = {};  // string literals
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace bigbatch

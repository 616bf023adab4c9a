// FusionTuner: ddp.fusion_bytes = auto — the bucket cap chosen by timing
// the run's own steps (Horovod's autotune is the reference; Sergeev & Del
// Balso 2018).
//
// The candidates are 16 KiB, 64 KiB, ... x4, up to the first that puts
// every gradient in one bucket (at most 64 MiB). Each runs `steps` synced
// steps after one untimed step that follows its re-layout; a step's time is
// from its synced beginBackward() to the end of finishBackward() — the
// forward, the backward and the exchange it did not hide. Then every rank
// takes the candidate whose slowest rank's median was least (one small
// max-allreduce: all ranks choose the same) and keeps it for the run. The
// policy only: the exchange lays the buckets out when told.
//
// Threading: the compute thread. Internal to src/ddp.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "bigbatch/ddp/job_collectives.h"

namespace bigbatch::ddp_detail {

class FusionTuner {
 public:
  // `numels`: the exchanged parameters' element counts (registration order);
  // `steps` >= 1 (DdpOptions::tuneSteps, checked by the exchange).
  FusionTuner(const std::vector<int64_t>& numels, int steps);

  // The cap to lay the buckets out for first.
  size_t first() const { return candidates_.front(); }
  // After a synced step that took `seconds` with the buckets laid out for
  // `current`: the cap to lay them out for next, or 0 to keep them.
  // Collective once every candidate is timed (a max-allreduce).
  size_t afterStep(double seconds, size_t current, JobCollectives& job);
  // Whether the choice is made (by timing, or restored).
  bool settled() const { return settled_; }
  // A resume: the choice the interrupted run made.
  void restore() { settled_ = true; }

 private:
  int steps_;
  std::vector<size_t> candidates_;
  std::vector<std::vector<double>> times_;
  size_t candidate_ = 0;
  int untimed_ = 1;  // steps to skip after a re-layout
  bool settled_ = false;
};

}  // namespace bigbatch::ddp_detail

// Picks the allreduce algorithm per call from the message size and the
// topology (all ranks on one host, or several hosts), like NCCL's and
// OpenMPI's tuned tables. The default table was seeded from
// `bigbatch bench allreduce` on the development machine (see
// docs/BENCHMARKS.md); a config overrides it (`comm.allreduce`,
// `comm.allreduce_table`). The resolved table is logged once, by rank 0, on
// the first call.
//
// Threading: like every Allreduce, one thread per rank.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch {

// Messages of fewer than `belowBytes` bytes use `algorithm` (first match wins;
// the last rule should have belowBytes = SIZE_MAX).
struct AllreduceRule {
  size_t belowBytes;
  std::string algorithm;
};

struct AllreduceTable {
  std::vector<AllreduceRule> singleHost;  // every rank on one host
  std::vector<AllreduceRule> multiHost;   // ranks on two or more hosts
};

AllreduceTable defaultAllreduceTable();

// Parses "SIZE:ALGO,SIZE:ALGO,...,ALGO" (SIZE in bytes, optional K/M/G
// suffix, powers of 1024; the last entry has no size and covers the rest),
// e.g. "64K:recursive_doubling,shm". Used for both topologies. Throws
// InvalidArgument naming the bad entry.
std::vector<AllreduceRule> parseAllreduceRules(const std::string& spec);
std::string formatAllreduceRules(const std::vector<AllreduceRule>& rules);

// The "auto" algorithm: dispatches each call by the table.
class AutoAllreduce : public Allreduce {
 public:
  AutoAllreduce(AllreduceOptions options, AllreduceTable table);
  const char* name() const override { return "auto"; }
  // The algorithm a call of `bytes` would use on `comm`.
  const std::string& choose(Communicator& comm, size_t bytes);

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;

 private:
  size_t pick(Communicator& comm, size_t bytes, bool& oneHost);
  AllreduceTable table_;
  // One algorithm object per rule, parallel to the tables; stateless, so one
  // AutoAllreduce may serve many communicators and threads.
  std::vector<std::unique_ptr<Allreduce>> single_, multi_;
  std::atomic<bool> loggedSingle_{false}, loggedMulti_{false};
};

}  // namespace bigbatch

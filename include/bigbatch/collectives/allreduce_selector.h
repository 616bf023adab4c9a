// Picks the allreduce algorithm per call from the message size and the
// topology (all ranks on one host, or several hosts), like NCCL's and
// OpenMPI's tuned tables. The default table was seeded from
// `bigbatch bench allreduce` on the development machine (see
// docs/BENCHMARKS.md); a config overrides it (`comm.allreduce`,
// `comm.allreduce_table`). The resolved table is logged once, by rank 0, on
// the first call.
//
// Online tuning (options.tuneTrials > 0): per communicator and power-of-two
// size class, the first calls rotate through the candidates — the table's
// choice, the ring, and MPI_Allreduce on an MPI transport — 1 + `tuneTrials`
// calls each (the first untimed); the ranks then agree on the fastest by the
// slowest rank's best call (one max-allreduce of 3 int64) and keep it,
// logged once. Each timed call starts right after a barrier, so a rank's
// lateness (rank imbalance) is not charged to the candidate it reached late.
// The barriers cost ~1 small message round per timed call, only while
// measuring.
// The table is the seed, the measurement on the machine at hand decides:
// a host whose cross-core copies are slow gets the ring's single-copy
// transfers for large messages.
//
// Threading: like every Allreduce, one thread per rank.
#pragma once

#include <atomic>
#include <map>
#include <mutex>
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
  // The table's algorithm for a call of `bytes` on `comm` (the tuning seed).
  const std::string& choose(Communicator& comm, size_t bytes);
  // After tuning: the chosen algorithm's name for `bytes` on `comm`; empty
  // while still measuring (or when tuning is off).
  std::string tunedChoice(const Communicator& comm, size_t bytes);
  // After tuning: the agreed best time in seconds of each candidate (the
  // table's choice, the ring, and MPI_Allreduce when it took part); empty
  // while still measuring.
  std::vector<double> tunedSeconds(const Communicator& comm, size_t bytes);

  // The tuning of `comm` — per size class measured or being measured: its
  // calls so far, this rank's best times, the agreed times and the winner —
  // as named numbers ("allreduce_tuning.<class>.<field>") for a checkpoint.
  // restoreTuning() puts such a state back on every rank, so a resumed run
  // keeps the algorithms the interrupted one chose (another algorithm sums
  // in another order, and on 3+ ranks the bits would differ) and a run
  // stopped while measuring goes on rotating where it stopped. Entries of
  // other names are ignored.
  std::map<std::string, double> tuningState(const Communicator& comm);
  // The choices online tuning has settled for `comm` so far, one per size
  // class (for summary.json; the log has them at debug level).
  struct TunedChoice {
    size_t fromBytes = 0, toBytes = 0;  // the size class [from, to]
    std::string algorithm;
    double seconds[3] = {0, 0, 0};  // the slowest rank's best call: the table's, ring, mpi (0: not run)
  };
  std::vector<TunedChoice> tunedChoices(const Communicator& comm);
  void restoreTuning(const Communicator& comm, const std::map<std::string, double>& state);

 protected:
  void reduce(Communicator& comm, void* data, size_t count, DataType type) override;
  void reduceStaged(Communicator& comm, void* data, size_t count, DataType type,
                    AllreduceStages& stages) override;

 private:
  // reduce() and reduceStaged() (stages null for the former): the same
  // choice and tuning either way.
  void dispatch(Communicator& comm, void* data, size_t count, DataType type,
                AllreduceStages* stages);
  size_t pick(Communicator& comm, size_t bytes, bool& oneHost);
  static int sizeClassOf(size_t bytes);
  // Tuning state of one (communicator, size class).
  struct Trial {
    int calls = 0;                  // calls made in this class
    double seconds[3] = {0, 0, 0};  // best timed call per candidate, this rank
    double agreed[3] = {0, 0, 0};   // the slowest rank's best (0: did not take part)
    int winner = -1;                // index into the candidates; -1 still measuring
    std::string choice;             // the winner's name, once settled
  };
  AllreduceTable table_;
  std::unique_ptr<Allreduce> ring_, mpi_;
  std::mutex trialsMutex_;
  std::map<std::pair<uint64_t, int>, Trial> trials_;  // (communicator id, size class)
  // One algorithm object per rule, parallel to the tables; stateless, so one
  // AutoAllreduce may serve many communicators and threads.
  std::vector<std::unique_ptr<Allreduce>> single_, multi_;
  std::atomic<bool> loggedSingle_{false}, loggedMulti_{false};
};

}  // namespace bigbatch

// Where a supervised job's workers run, so that the supervisor can leave a
// lost worker's place out of the next attempt: the hosts in the launcher's
// order, and the slots (common/launch_slot.h) each host still offers.
//
// The hosts come from the launcher (its --hostfile or --host; one local
// host when it names none), or, where it names none but the ranks run on
// several (srun, mpirun in a Slurm allocation), from where the first
// attempt's ranks said they ran (common/rank_placement.h). Which host and
// slot a failed rank had is what that rank said; only for an attempt that
// failed before every rank had started is it taken from mpirun's default
// mapping by slot (host 0's slots first, then host 1's). Dropping that
// slot gives the next attempt one worker fewer, the launcher's host
// options for the slots left (a host with none is left out: a lost host;
// rank_launcher.h), and BIGBATCH_SLOTS, from which each rank takes the slot
// — the GPU — that is its own.
//
// Threading: the supervisor's thread; a value type.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "bigbatch/common/rank_placement.h"

namespace bigbatch {

class WorkerPlacement {
 public:
  struct Host {
    std::string name;        // as the launcher names it; "" for the local host
    std::vector<int> slots;  // the slots the job may use, ascending
  };

  // `workers` ranks on the hosts the launcher's words name: a hostfile
  // (--hostfile, -hostfile, --machinefile, -machinefile; each line "NAME
  // slots=N", # comments), or a host list (--host, -host, -H: "a:2,b"); one
  // local host when they name none. The first `workers` slots in mapping
  // order are the job's. nullopt, with `why` saying so, when the hosts
  // cannot be known from them: a hostfile line without slots=, fewer slots
  // than workers (mpirun would oversubscribe), or a multi-node Slurm
  // allocation without either option (its nodes are the allocation's).
  static std::optional<WorkerPlacement> forLauncher(const std::vector<std::string>& launcher,
                                                    int workers, std::string* why);
  // The hosts the ranks said they ran on, in order of their lowest rank,
  // each with the slots its ranks took.
  static WorkerPlacement fromReports(const std::vector<RankPlace>& places);

  int workers() const;
  const std::vector<Host>& hosts() const { return hosts_; }

  // Host index and slot of world rank `rank` under mapping by slot.
  std::pair<int, int> placeOf(int rank) const;
  // Leaves rank `rank`'s slot out — the host and slot its own report in
  // `places` gives, else (no report of it, or a host none of the launcher's
  // names means) placeOf's — and returns "slot S of host NAME" (", its
  // last: the host" when none is left there; " (as mapping by slot
  // places it)" for the fallback) for the supervisor's message.
  std::string drop(int rank, const std::vector<RankPlace>& places = {});
  bool dropped() const { return dropped_; }

  // BIGBATCH_SLOTS's value (common/launch_slot.h).
  std::string slotPlan() const;

 private:
  // The host `place` ran on; -1 when none of the names means it.
  int hostOf(const RankPlace& place) const;

  std::vector<Host> hosts_;
  bool dropped_ = false;
};

}  // namespace bigbatch

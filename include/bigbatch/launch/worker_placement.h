// Where a supervised job's workers run, so that the supervisor can leave a
// lost worker's place out of the next attempt: the hosts in the launcher's
// order, and the slots (common/launch_slot.h) each host still offers.
//
// mpirun maps ranks by slot: host 0's slots first, then host 1's, ... So
// with the hosts known (the launcher's --hostfile or --host; one local host
// when it names none) world rank r's host and slot follow from the
// placement alone. Dropping that slot gives the next attempt one worker
// fewer, `--host a:n,b:m` with the slots left (a host with none is left
// out: a lost host), and BIGBATCH_SLOTS, from which each rank takes the
// slot — the GPU — that is its own.
//
// Threading: the supervisor's thread; a value type.
#pragma once

#include <optional>
#include <string>
#include <vector>

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
  // cannot be known: a hostfile line without slots=, fewer slots than
  // workers (mpirun would oversubscribe), or a multi-node Slurm allocation
  // without either option (its nodes are the allocation's).
  static std::optional<WorkerPlacement> forLauncher(const std::vector<std::string>& launcher,
                                                    int workers, std::string* why);

  int workers() const;
  const std::vector<Host>& hosts() const { return hosts_; }

  // Host index and slot of world rank `rank` (mapping by slot).
  std::pair<int, int> placeOf(int rank) const;
  // Leaves rank `rank`'s slot out; returns "slot S of host NAME" (", its
  // last: the host" when none is left there) for the supervisor's message.
  std::string drop(int rank);
  bool dropped() const { return dropped_; }

  // The launcher's host option for this placement: {"--host", "a:2,b:1"}
  // for named hosts, nothing for the local host.
  std::vector<std::string> hostArguments() const;
  // BIGBATCH_SLOTS's value (common/launch_slot.h).
  std::string slotPlan() const;

 private:
  std::vector<Host> hosts_;
  bool dropped_ = false;
};

}  // namespace bigbatch

// MpiCommunicator: a Communicator over an MPI communicator (OpenMPI).
//
// bigbatch's trainer initialises MPI with MPI_THREAD_SERIALIZED: any thread
// may call MPI, one at a time, and the caller serialises (Communicator's
// contract). In training that is DistributedDataParallel's communication
// thread, or the compute thread while that thread is idle; a failing run's
// error notice (postError) is sent from the communication thread too
// (DistributedDataParallel::postError), never beside a call in flight.
// The torch.distributed backend asks for MPI_THREAD_MULTIPLE instead: each
// of its process groups (new_group, a DeviceMesh's dimensions) is an MPI
// communicator of its own (group()) with a communication thread of its own,
// and those threads call MPI at once — each still one at a time on its own
// communicator. Errors return codes (MPI_ERRORS_RETURN) that become
// bigbatch errors carrying MPI's own error string. Waits poll MPI_Test
// against the deadline and probe for error notices from peers, so a peer
// that fails or stops answering ends the wait instead of hanging it.
#pragma once

#include <mpi.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class MpiCommunicator : public Communicator {
 public:
  // The thread support asked of MPI by the call that initialises it.
  enum class Threads { kSerialized, kMultiple };
  // Initialises MPI (once per process; a later call, or MPI initialised by
  // another library first, keeps the level it got).
  static void initialise(Threads threads);
  // The thread level MPI provides (MPI_THREAD_SINGLE .. MPI_THREAD_MULTIPLE),
  // or -1 before MPI is initialised.
  static int threadLevel();
  // Whether bigbatch initialised MPI (initialise()), rather than another
  // library (mpi4py, the script's own MPI_Init) before it.
  static bool initialisedByBigbatch();
  // "MPI_THREAD_SINGLE" .. "MPI_THREAD_MULTIPLE", for messages.
  static const char* threadLevelName(int level);
  // The world communicator; initialises MPI on first use. Collective over
  // MPI_COMM_WORLD.
  static std::unique_ptr<MpiCommunicator> world(Threads threads = Threads::kSerialized);
  // A communicator of the MPI_COMM_WORLD ranks `worldRanks` (this process
  // among them; its rank there is its index in the list), made by those
  // ranks alone (MPI_Comm_create_group), as c10d makes a group: the ranks
  // outside it never hear of it. The members first meet in a deadline-aware
  // barrier that compares the lists, so a member that never comes (or
  // lists other ranks) is a TimeoutError (MismatchError) within `timeoutMs`
  // instead of a hang. A member that comes after its peers' deadline may
  // still pass its meeting on their messages and wait in
  // MPI_Comm_create_group, which has no deadline: the caller ends the job
  // on such an error (the backend makes it the process's failure, which
  // MPI_Abort ends). Initialises MPI (kMultiple) on first use.
  // Threading: calls run one at a time in a process, in the same order on
  // every member (fixed tags on MPI_COMM_WORLD), beside any use of other
  // communicators when MPI is MPI_THREAD_MULTIPLE.
  static std::unique_ptr<MpiCommunicator> group(const std::vector<int>& worldRanks,
                                                int64_t timeoutMs);
  // True when this process was started by mpirun (or another MPI launcher).
  static bool launchedByMpi();

  explicit MpiCommunicator(MPI_Comm comm, bool owned);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int localRank() const override { return localRank_; }
  int localSize() const override { return localSize_; }
  std::string transportName() const override { return "MPI"; }

  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override;
  std::unique_ptr<Request> irecvAny(void* data, size_t bytes, int tag) override;
  std::unique_ptr<Communicator> split(int color, int key) override;
  void postError(const std::string& message) override;

  MPI_Comm handle() const { return comm_; }
  // Throws if a peer posted an error notice; called by waits.
  void checkPeerErrors();
  void pollPeerErrors() override { checkPeerErrors(); }
  // Whether a wait on this communicator failed (a deadline passed, a peer
  // failed or disagreed): its ranks may no longer all take part in a
  // collective.
  bool broken() const { return broken_.load(); }
  void markBroken() { broken_ = true; }
  // Shared-memory windows of this process not yet freed (for tests).
  static int liveSharedWindows();

 protected:
  int hostColor() override { return hostColor_; }
  // MPI_Win_allocate_shared on this (single-host) communicator. The window
  // is freed (MPI_Win_free, collective) when the segment is replaced by a
  // larger one or the communicator goes away — after a deadline-aware
  // barrier, and only while every rank can still take part: not once a wait
  // failed, not while an exception unwinds the stack, not after
  // MPI_Finalize. Then MPI_Finalize (or the job's end) releases it instead,
  // since a collective free would hang a rank whose peer is gone.
  std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes) override;

 private:
  MPI_Comm comm_;
  bool owned_;
  std::atomic<bool> broken_{false};
  int rank_ = 0, size_ = 1, localRank_ = 0, localSize_ = 1, hostColor_ = 0;
};

// Converts an MPI return code into an IoError naming the call and MPI's text.
void checkMpi(int rc, const char* call);

}  // namespace bigbatch

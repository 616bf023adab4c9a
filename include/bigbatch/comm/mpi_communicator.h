// MpiCommunicator: a Communicator over an MPI communicator (OpenMPI).
//
// MPI is initialised once per process with MPI_THREAD_SERIALIZED: any thread
// may call MPI, one at a time (in training, only the communication thread
// does after start-up). Errors return codes (MPI_ERRORS_RETURN) that become
// bigbatch errors carrying MPI's own error string. Waits poll MPI_Test
// against the deadline and probe for error notices from peers, so a peer
// that fails or stops answering ends the wait instead of hanging it.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class MpiCommunicator : public Communicator {
 public:
  // The world communicator; initialises MPI on first use.
  static std::unique_ptr<MpiCommunicator> world();
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
  std::unique_ptr<Communicator> split(int color, int key) override;
  void postError(const std::string& message) override;

  MPI_Comm handle() const { return comm_; }
  // Throws if a peer posted an error notice; called by waits.
  void checkPeerErrors();
  void pollPeerErrors() override { checkPeerErrors(); }

 protected:
  int hostColor() override { return hostColor_; }
  // MPI_Win_allocate_shared on this (single-host) communicator. The window is
  // never freed explicitly: MPI_Win_free is collective and would hang a rank
  // that tears down after a peer failed; MPI_Finalize releases it.
  std::unique_ptr<SharedSegment> allocateShared(size_t slotBytes) override;

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1, localRank_ = 0, localSize_ = 1, hostColor_ = 0;
};

// Converts an MPI return code into an IoError naming the call and MPI's text.
void checkMpi(int rc, const char* call);

}  // namespace bigbatch

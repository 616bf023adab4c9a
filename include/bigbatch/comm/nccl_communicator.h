// NcclCommunicator: the GPU ranks' gradient transport — one NVIDIA NCCL
// communicator per job, with a CUDA stream of its own, for the bucketed
// allreduce of gradients that live in device memory.
//
// Bootstrap: rank 0 draws a unique id (uniqueId()), the job's host
// Communicator broadcasts its 128 bytes over MPI, and every rank builds its
// NcclCommunicator from it (collective). The communicator is NCCL's
// non-blocking kind (ncclConfig_t::blocking = 0), so no call can hang the
// host: every wait — the set-up, each enqueue, synchronize() — polls NCCL's
// state and the stream under a deadline (the job's comm.timeout_s); past it,
// or on an error NCCL reports (a peer that died, a broken link), the
// communicator is aborted, which makes its kernels on the device return, and
// TimeoutError or Error is raised naming the operation. The trainer appends
// the heartbeat's diagnosis (which rank stopped) to that message.
//
// Threading: one thread at a time uses the object (in training: the thread
// that runs backward enqueues, the compute thread synchronizes after it —
// never both at once). The deadline inside synchronize() is the watchdog of
// a hung NCCL exchange; the StallWatchdog scope the caller opens around it
// is the backstop (it ends the process). Exists in builds linked with NCCL
// (available()); elsewhere the constructor throws InvalidArgument naming
// the CUDA build.
#pragma once

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>

#include "bigbatch/comm/communicator.h"

namespace bigbatch {

class NcclCommunicator {
 public:
  static constexpr size_t kIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES
  using Id = std::array<uint8_t, kIdBytes>;

  // True when this build was linked with NCCL (the CUDA variant).
  static bool available();
  // The linked NCCL's version ("2.28.9"), or "none".
  static std::string version();
  // A fresh unique id (rank 0 draws it; every rank must construct with it).
  static Id uniqueId();

  // Collective over the `size` ranks constructing with `id`: this one is
  // rank `rank` on CUDA device `device` (no two ranks of one communicator
  // may share a device: NCCL refuses it). Waits at most `timeoutMs` for the
  // others, then aborts and throws TimeoutError (NCCL cannot say which rank
  // is missing; the message names the set-up and the deadline). `stream`:
  // the cudaStream_t to run on (one of libtorch's pool streams, so torch
  // ops can join it; not destroyed here), or null for one of its own.
  NcclCommunicator(const Id& id, int rank, int size, int device, int64_t timeoutMs,
                   void* stream = nullptr);
  ~NcclCommunicator();
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int device() const { return device_; }
  int64_t timeoutMs() const { return timeoutMs_; }

  // The cudaStream_t every operation runs on.
  void* stream() const { return stream_; }

  // Enqueues on stream() the in-place sum across ranks of `count` elements
  // of `type` (float32, float16, bfloat16, float64, int64) at device address
  // `data`; returns once NCCL accepted it (the sum is complete when
  // synchronize() returns or an event recorded on stream() after it fires).
  void allreduceSum(void* data, size_t count, DataType type);

  // Blocks until everything enqueued on stream() has completed, polling the
  // stream and NCCL's error state every ~50 µs: past timeoutMs() aborts and
  // throws TimeoutError, a NCCL error aborts and throws Error — both naming
  // `operation`. Returns the seconds waited.
  double synchronize(const char* operation);

  // Aborts the communicator (idempotent): enqueued and running operations
  // end without completing; every later call throws Error.
  void abort();
  bool aborted() const { return aborted_; }

 private:
  using Clock = std::chrono::steady_clock;
  static constexpr std::chrono::microseconds kPoll{50};
  // NCCL's state: true while "in progress" (non-blocking mode); an error it
  // reports aborts and throws Error naming `operation`.
  bool inProgress(const char* operation);
  // Past `deadline`: aborts and throws TimeoutError naming `operation`.
  void failPast(const char* operation, Clock::time_point deadline);
  // Waits for NCCL's state to leave "in progress" under the deadline.
  void awaitState(const char* operation);
  void releaseStream();  // destroys the stream if it is our own

  int rank_ = 0, size_ = 0, device_ = 0;
  int64_t timeoutMs_ = 0;
  void* comm_ = nullptr;    // ncclComm_t
  void* stream_ = nullptr;  // cudaStream_t
  bool ownStream_ = false;
  bool aborted_ = false;
};

}  // namespace bigbatch

// Checkpoints written while training goes on: the training step waits only
// for a snapshot of the state (its tensors copied in memory), and the
// serialisation, the write and the fsync run on a thread of their own —
// the snapshot-then-persist split of CheckFreq (Mohan, Phanishayee &
// Chidambaram, FAST '21). Each write is still atomic through CheckpointDir
// (temporary file, fsync, rename, then `latest`): a crash in the middle
// leaves the previous checkpoint the newest one found.
//
// At most one write is in flight: submit() first waits for the previous one
// (so a disk slower than the checkpoint interval slows training down rather
// than queueing snapshots without bound). A write's error is rethrown by
// the next submit() or wait().
//
// Threading: submit() and wait() from one thread (the trainer's); the
// writer thread touches only the CheckpointDir and the checkpoint handed
// to it.
#pragma once

#include <exception>
#include <memory>
#include <string>
#include <thread>

#include "bigbatch/ckpt/checkpoint.h"

namespace bigbatch {

// A copy of `c` whose tensors share no storage with the ones training goes
// on changing (parameters, optimizer state, buffers).
Checkpoint snapshotCheckpoint(const Checkpoint& c);

class BackgroundCheckpointWriter {
 public:
  explicit BackgroundCheckpointWriter(std::unique_ptr<CheckpointDir> dir);
  ~BackgroundCheckpointWriter();  // waits for the write in flight; drops its error
  BackgroundCheckpointWriter(const BackgroundCheckpointWriter&) = delete;
  BackgroundCheckpointWriter& operator=(const BackgroundCheckpointWriter&) = delete;

  // Waits for the previous write (rethrowing its error), then writes `c` on
  // the writer thread. `c` must own its tensors (snapshotCheckpoint).
  void submit(Checkpoint c);
  // Returns once no write is in flight; rethrows the last write's error.
  void wait();
  // The file the last finished write made, and the seconds it took.
  const std::string& lastPath() const { return lastPath_; }
  double lastSeconds() const { return lastSeconds_; }

 private:
  std::unique_ptr<CheckpointDir> dir_;
  std::thread writer_;
  std::exception_ptr error_;
  std::string lastPath_;
  double lastSeconds_ = 0;
};

}  // namespace bigbatch

// Checkpoints written while training goes on: the training step waits only
// for a snapshot of the state (its tensors copied in memory), and the
// serialisation, the write and the fsync run on a thread of their own —
// the snapshot-then-persist split of CheckFreq (Mohan, Phanishayee &
// Chidambaram, FAST '21). Each write is still atomic through CheckpointDir
// (temporary file, fsync, rename, then `latest`): a crash in the middle
// leaves the previous checkpoint the newest one found.
//
// On a GPU the snapshot costs the step one device-to-device copy: each
// device tensor is cloned on the current (compute) stream, and the clones
// go to pinned host memory on a side stream that waits for them — never on
// the compute stream, so the step does not queue behind the bus. The writer
// thread waits for that stream's copies before it serialises.
//
// At most one write is in flight: submit() first waits for the previous one
// (so a disk slower than the checkpoint interval slows training down rather
// than queueing snapshots without bound). A write's error is rethrown by
// the next submit() or wait(). Its progress can be seen (stage()) and, for
// tests and fault injection, held after its first chunk is on disk
// (holdMidWrite): a torn temporary file, as a crash mid-write leaves.
//
// Threading: submit(), wait(), holdMidWrite(), waitHeldMidWrite() and
// release() from one thread (the trainer's); stage() from any; the writer
// thread touches only the CheckpointDir, the checkpoint handed to it and
// the stage and hold state (guarded by mutex_).
#pragma once

#include <atomic>
#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "bigbatch/ckpt/checkpoint.h"

namespace bigbatch {

// A checkpoint whose tensors share no storage with the ones training goes
// on changing (parameters, optimizer state, buffers), and — when some were
// on a GPU — the wait for their copies to reach host memory.
struct CheckpointSnapshot {
  Checkpoint checkpoint;
  // Blocks until every device copy has landed; empty when there were none.
  std::function<void()> waitForCopies;
};

// The snapshot of `c` (see the top of this file for device tensors).
CheckpointSnapshot snapshotCheckpoint(const Checkpoint& c);

class BackgroundCheckpointWriter {
 public:
  enum class Stage { kIdle, kCopying, kSerialising, kWriting, kDone };

  explicit BackgroundCheckpointWriter(std::unique_ptr<CheckpointDir> dir);
  ~BackgroundCheckpointWriter();  // releases a hold, waits for the write in flight; drops its error
  BackgroundCheckpointWriter(const BackgroundCheckpointWriter&) = delete;
  BackgroundCheckpointWriter& operator=(const BackgroundCheckpointWriter&) = delete;

  // Waits for the previous write (rethrowing its error), then writes the
  // snapshot on the writer thread and returns.
  void submit(CheckpointSnapshot s);
  // `c` must own its tensors (a copy, or state nothing changes any more).
  void submit(Checkpoint c) { submit(CheckpointSnapshot{std::move(c), {}}); }
  // Returns once no write is in flight; rethrows the last write's error.
  void wait();
  // The file the last finished write made, and the seconds it took.
  const std::string& lastPath() const { return lastPath_; }
  double lastSeconds() const { return lastSeconds_; }

  // Where the write in flight is (kDone once it has ended, kIdle before
  // the first).
  Stage stage() const { return stage_.load(); }
  // The next write stops once its first chunk (atomic_file.h) is in the
  // temporary file, until release() or the destructor.
  void holdMidWrite();
  // Blocks until a held write has stopped there (true), or the write ended
  // before it got there (false: it failed before its first chunk). A
  // checkpoint smaller than a chunk is held whole, before its rename.
  bool waitHeldMidWrite();
  void release();

 private:
  void write(CheckpointSnapshot s);

  std::unique_ptr<CheckpointDir> dir_;
  std::thread writer_;
  std::exception_ptr error_;
  std::string lastPath_;
  double lastSeconds_ = 0;
  std::atomic<Stage> stage_{Stage::kIdle};
  std::mutex mutex_;
  std::condition_variable changed_;
  bool hold_ = false;      // guarded by mutex_
  bool held_ = false;      // guarded by mutex_: the writer is stopped mid-write
  bool released_ = false;  // guarded by mutex_
};

}  // namespace bigbatch

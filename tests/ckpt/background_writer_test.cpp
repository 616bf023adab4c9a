// BackgroundCheckpointWriter: the snapshot is independent of the live
// tensors, the file written is the snapshot's, one write at a time, errors
// come back to the trainer, and an interrupted write leaves `latest` on the
// previous checkpoint.
#include "bigbatch/ckpt/background_writer.h"

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <filesystem>
#include <fstream>

#include "bigbatch/ckpt/atomic_file.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

namespace fs = std::filesystem;

Checkpoint sample(int64_t step, float value) {
  Checkpoint c;
  c.config = "[run]\nseed = 1\n";
  c.globalStep = step;
  c.globalBatch = 64;
  c.parameters = {{"w", torch::full({4, 3}, value)}};
  c.optimizer = {{"w.momentum", torch::full({4, 3}, 2 * value)}};
  c.rankBuffers = {{{"bn.running_mean", torch::full({3}, value)}}};
  c.rankRng = {torch::arange(8, torch::kUInt8)};
  c.counters = {{"images", 1.0}};
  return c;
}

struct TempDir {
  fs::path path = fs::temp_directory_path() / fs::path("bb-bgw-" + std::to_string(::getpid()));
  TempDir() { fs::remove_all(path); }
  ~TempDir() { fs::remove_all(path); }
};

TEST(SnapshotCheckpoint, SharesNoStorageWithTheLiveState) {
  Checkpoint live = sample(5, 1.0f);
  const Checkpoint snap = snapshotCheckpoint(live).checkpoint;
  live.parameters[0].second.add_(10.0f);  // what the next optimizer step does
  live.optimizer[0].second.add_(10.0f);
  live.rankBuffers[0][0].second.add_(10.0f);
  live.rankRng[0].add_(1);
  EXPECT_TRUE(torch::equal(snap.parameters[0].second, torch::full({4, 3}, 1.0f)));
  EXPECT_TRUE(torch::equal(snap.optimizer[0].second, torch::full({4, 3}, 2.0f)));
  EXPECT_TRUE(torch::equal(snap.rankBuffers[0][0].second, torch::full({3}, 1.0f)));
  EXPECT_TRUE(torch::equal(snap.rankRng[0], torch::arange(8, torch::kUInt8)));
  EXPECT_EQ(snap.globalStep, 5);
  EXPECT_EQ(snap.config, live.config);
}

TEST(BackgroundCheckpointWriter, WritesTheSnapshotNotTheLaterState) {
  TempDir dir;
  BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
  Checkpoint live = sample(10, 1.0f);
  writer.submit(snapshotCheckpoint(live));
  live.parameters[0].second.fill_(99.0f);  // training goes on at once
  writer.wait();
  EXPECT_EQ(fs::path(writer.lastPath()).filename(), "ckpt-000000010.pt");
  const Checkpoint back = readCheckpoint(writer.lastPath());
  EXPECT_EQ(back.globalStep, 10);
  EXPECT_TRUE(torch::equal(back.parameters[0].second, torch::full({4, 3}, 1.0f)));
  std::ifstream latest(dir.path / "latest");
  std::string name;
  latest >> name;
  EXPECT_EQ(name, "ckpt-000000010.pt");
}

TEST(BackgroundCheckpointWriter, OneWriteAtATimeAndRetention) {
  TempDir dir;
  BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
  for (int64_t step = 1; step <= 5; ++step) writer.submit(snapshotCheckpoint(sample(step, step)));
  writer.wait();
  // Each submit waited for the one before: all five were written in order,
  // and retention kept the newest two.
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-000000003.pt"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-000000004.pt"));
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-000000005.pt"));
  const auto newest = CheckpointDir(dir.path.string(), 2).latest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_TRUE(torch::equal(readCheckpoint(*newest).parameters[0].second, torch::full({4, 3}, 5.0f)));
}

TEST(BackgroundCheckpointWriter, AWriteErrorComesBackToTheTrainer) {
  TempDir dir;
  fs::create_directories(dir.path.parent_path());
  { std::ofstream(dir.path) << "a file where the directory should be"; }
  BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
  writer.submit(snapshotCheckpoint(sample(1, 1.0f)));
  EXPECT_THROW(writer.wait(), Error);
  EXPECT_NO_THROW(writer.wait());  // reported once
  fs::remove(dir.path);
}

TEST(BackgroundCheckpointWriter, AnInterruptedWriteLeavesThePreviousCheckpointNewest) {
  TempDir dir;
  {
    BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
    writer.submit(snapshotCheckpoint(sample(4, 4.0f)));
    writer.wait();
  }
  // A process killed in the middle of the next write leaves its partial
  // temporary file and nothing else.
  { std::ofstream(dir.path / "ckpt-000000008.pt.tmp") << "BBCKPT1\ntorn"; }
  const auto newest = CheckpointDir(dir.path.string(), 2).latest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(fs::path(*newest).filename(), "ckpt-000000004.pt");
}

// A checkpoint of several write chunks (atomic_file.h: 64 KiB), so a write
// can be seen — and held — in the middle.
Checkpoint large(int64_t step, float value) {
  Checkpoint c = sample(step, value);
  c.parameters.emplace_back("big", torch::full({100000}, value));  // 400 kB
  return c;
}

// submit() hands the write over and returns: with the writer held after
// its first chunk, submit has returned while the temporary file is still
// partial; and during that time the previous checkpoint is the newest
// that loads — what a crash there (the process killed mid-write) leaves.
TEST(BackgroundCheckpointWriter, SubmitReturnsMidWriteAndATornWriteLeavesThePreviousLoadable) {
  TempDir dir;
  BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
  writer.submit(snapshotCheckpoint(large(4, 4.0f)));
  writer.wait();
  EXPECT_EQ(writer.stage(), BackgroundCheckpointWriter::Stage::kDone);
  writer.holdMidWrite();
  writer.submit(snapshotCheckpoint(large(8, 8.0f)));
  ASSERT_TRUE(writer.waitHeldMidWrite());
  EXPECT_EQ(writer.stage(), BackgroundCheckpointWriter::Stage::kWriting);
  const fs::path tmp = dir.path / "ckpt-000000008.pt.tmp";
  ASSERT_TRUE(fs::exists(tmp));
  EXPECT_EQ(fs::file_size(tmp), kWriteChunkBytes);  // torn: one chunk of ~400 kB
  EXPECT_FALSE(fs::exists(dir.path / "ckpt-000000008.pt"));
  const auto newest = CheckpointDir(dir.path.string(), 2).latest();
  ASSERT_TRUE(newest.has_value());
  EXPECT_EQ(fs::path(*newest).filename(), "ckpt-000000004.pt");
  EXPECT_TRUE(torch::equal(readCheckpoint(*newest).parameters[0].second, torch::full({4, 3}, 4.0f)));
  EXPECT_THROW(readCheckpoint(tmp.string()), InvalidArgument);  // the torn file is refused
  writer.release();
  writer.wait();
  EXPECT_EQ(fs::path(writer.lastPath()).filename(), "ckpt-000000008.pt");
  EXPECT_FALSE(fs::exists(tmp));
}

// A hold that is never released does not hang the trainer's exit.
TEST(BackgroundCheckpointWriter, ADestroyedWriterReleasesItsHold) {
  TempDir dir;
  {
    BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
    writer.holdMidWrite();
    writer.submit(snapshotCheckpoint(large(3, 3.0f)));
    ASSERT_TRUE(writer.waitHeldMidWrite());
  }
  EXPECT_TRUE(fs::exists(dir.path / "ckpt-000000003.pt"));
}

// A write that fails before its first chunk is never held: the wait says
// so instead of blocking, and the error comes back.
TEST(BackgroundCheckpointWriter, AWriteThatFailsFirstIsNotWaitedForForever) {
  TempDir dir;
  fs::create_directories(dir.path.parent_path());
  { std::ofstream(dir.path) << "a file where the directory should be"; }
  BackgroundCheckpointWriter writer(std::make_unique<CheckpointDir>(dir.path.string(), 2));
  writer.holdMidWrite();
  writer.submit(snapshotCheckpoint(large(2, 2.0f)));
  EXPECT_FALSE(writer.waitHeldMidWrite());
  EXPECT_THROW(writer.wait(), Error);
  fs::remove(dir.path);
}

}  // namespace
}  // namespace bigbatch

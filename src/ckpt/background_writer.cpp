#include "bigbatch/ckpt/background_writer.h"

#include <chrono>
#include <utility>

namespace bigbatch {
namespace {

NamedTensors cloned(const NamedTensors& tensors) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) out.emplace_back(name, t.detach().clone());
  return out;
}

}  // namespace

Checkpoint snapshotCheckpoint(const Checkpoint& c) {
  Checkpoint s = c;  // the scalars, the config and the counters by value
  s.parameters = cloned(c.parameters);
  s.optimizer = cloned(c.optimizer);
  for (auto& rank : s.rankBuffers) rank = cloned(rank);
  for (auto& rank : s.rankCodec) rank = cloned(rank);
  for (auto& rng : s.rankRng) rng = rng.clone();
  return s;
}

BackgroundCheckpointWriter::BackgroundCheckpointWriter(std::unique_ptr<CheckpointDir> dir)
    : dir_(std::move(dir)) {}

BackgroundCheckpointWriter::~BackgroundCheckpointWriter() {
  if (writer_.joinable()) writer_.join();
}

void BackgroundCheckpointWriter::submit(Checkpoint c) {
  wait();
  writer_ = std::thread([this, c = std::move(c)] {
    try {
      const auto t0 = std::chrono::steady_clock::now();
      lastPath_ = dir_->save(c);
      lastSeconds_ =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

void BackgroundCheckpointWriter::wait() {
  if (writer_.joinable()) writer_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

}  // namespace bigbatch

#include "bigbatch/ckpt/background_writer.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/Event.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <chrono>
#include <optional>
#include <utility>

namespace bigbatch {
namespace {

// Device tensors of one snapshot: cloned on the compute stream, then sent
// to pinned host memory on a side stream that waits for the clones.
class DeviceCopies {
 public:
  // The host tensor that will hold `t` (pinned, filled once wait() returns).
  torch::Tensor add(const torch::Tensor& t) {
    if (!side_) {
      device_ = t.device();
      const c10::impl::VirtualGuardImpl impl(device_.type());
      compute_ = impl.getStream(device_);
      side_ = impl.getStreamFromGlobalPool(device_);
      cloned_ = std::make_shared<c10::Event>(device_.type());
    }
    TORCH_CHECK(t.device() == device_, "a checkpoint's tensors are on one device");
    // The clone is all the step waits for: a copy in device memory, in
    // the compute stream's order (before the next step changes `t`).
    pending_.push_back(t.detach().clone(at::MemoryFormat::Contiguous));
    host_.push_back(torch::empty(t.sizes(), t.options().device(torch::kCPU).pinned_memory(true)));
    return host_.back();
  }

  // Queues the copies to the host on the side stream; returns the wait for
  // them (for the writer thread).
  std::function<void()> start() {
    if (!side_) return {};
    cloned_->record(compute_);
    cloned_->block(*side_);
    {
      const c10::StreamGuard onSide(*side_);
      for (size_t i = 0; i < pending_.size(); ++i) {
        host_[i].copy_(pending_[i], /*non_blocking=*/true);
        // Freed here, on the trainer's thread: the block must wait for
        // the side stream's copy, not go to the compute stream's next use.
        pending_[i].record_stream(*side_);
      }
    }
    auto landed = std::make_shared<c10::Event>(device_.type());
    landed->record(*side_);
    pending_.clear();
    return [landed, device = device_] {
      // The writer thread has no current device: without the guard the
      // query would make a context on GPU 0 for every rank.
      const c10::DeviceGuard onDevice(device);
      // c10::Event has no blocking wait in every libtorch this builds on:
      // poll, on the writer thread only.
      while (!landed->query()) std::this_thread::sleep_for(std::chrono::microseconds(200));
    };
  }

 private:
  torch::Device device_ = torch::kCPU;
  c10::Stream compute_{c10::Stream::DEFAULT, torch::Device(torch::kCPU)};
  std::optional<c10::Stream> side_;
  std::shared_ptr<c10::Event> cloned_;
  std::vector<torch::Tensor> pending_, host_;
};

torch::Tensor own(const torch::Tensor& t, DeviceCopies& device) {
  if (t.device().is_cpu()) return t.detach().clone();
  return device.add(t);
}

NamedTensors owned(const NamedTensors& tensors, DeviceCopies& device) {
  NamedTensors out;
  out.reserve(tensors.size());
  for (const auto& [name, t] : tensors) out.emplace_back(name, own(t, device));
  return out;
}

}  // namespace

CheckpointSnapshot snapshotCheckpoint(const Checkpoint& c) {
  DeviceCopies device;
  CheckpointSnapshot s;
  s.checkpoint = c;  // the scalars, the config and the counters by value
  s.checkpoint.parameters = owned(c.parameters, device);
  s.checkpoint.optimizer = owned(c.optimizer, device);
  for (auto& rank : s.checkpoint.rankBuffers) rank = owned(rank, device);
  for (auto& rank : s.checkpoint.rankCodec) rank = owned(rank, device);
  for (auto& rng : s.checkpoint.rankRng) rng = own(rng, device);
  s.waitForCopies = device.start();
  return s;
}

BackgroundCheckpointWriter::BackgroundCheckpointWriter(std::unique_ptr<CheckpointDir> dir)
    : dir_(std::move(dir)) {}

BackgroundCheckpointWriter::~BackgroundCheckpointWriter() {
  release();
  if (writer_.joinable()) writer_.join();
}

void BackgroundCheckpointWriter::submit(CheckpointSnapshot s) {
  wait();
  stage_ = Stage::kCopying;
  writer_ = std::thread([this, s = std::move(s)]() mutable { write(std::move(s)); });
}

void BackgroundCheckpointWriter::write(CheckpointSnapshot s) {
  bool holding = false;
  {
    const std::lock_guard<std::mutex> lock(mutex_);
    holding = std::exchange(hold_, false);
  }
  auto stopMidWrite = [&](size_t) {
    stage_ = Stage::kWriting;
    if (!holding) return;
    holding = false;
    std::unique_lock<std::mutex> lock(mutex_);
    held_ = true;
    changed_.notify_all();
    changed_.wait(lock, [&] { return released_; });
    held_ = false;
  };
  try {
    const auto t0 = std::chrono::steady_clock::now();
    if (s.waitForCopies) s.waitForCopies();
    stage_ = Stage::kSerialising;
    lastPath_ = dir_->save(s.checkpoint, stopMidWrite);
    lastSeconds_ = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  } catch (...) {
    error_ = std::current_exception();
  }
  stage_ = Stage::kDone;
  const std::lock_guard<std::mutex> lock(mutex_);
  changed_.notify_all();
}

void BackgroundCheckpointWriter::wait() {
  if (writer_.joinable()) writer_.join();
  if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
}

void BackgroundCheckpointWriter::holdMidWrite() {
  const std::lock_guard<std::mutex> lock(mutex_);
  hold_ = true;
  released_ = false;
}

bool BackgroundCheckpointWriter::waitHeldMidWrite() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return held_ || stage_.load() == Stage::kDone; });
  return held_;
}

void BackgroundCheckpointWriter::release() {
  const std::lock_guard<std::mutex> lock(mutex_);
  hold_ = false;
  released_ = true;
  changed_.notify_all();
}

}  // namespace bigbatch

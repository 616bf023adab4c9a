// Training checkpoints: everything a run needs to continue bit for bit —
// weights, every rank's BatchNorm buffers and RNG state, optimizer state,
// the position in the data order (epoch, step inside it), counters, and
// the resolved config — in one versioned file.
//
// Format: a 24-byte frame (magic "BBCKPT1\n", payload length, FNV-1a 64 of
// the payload; little-endian u64s) checked before anything is parsed — a
// torn or corrupt file is refused by name, and libtorch's unpickler never
// sees unchecked bytes — then the payload, torch::pickle_save of a dict:
//   format "bigbatch-checkpoint", version, config (TOML), world_size,
//   global_batch, epoch, step_in_epoch, global_step, parameters {name: T},
//   rank_buffers [{name: T} per rank], rank_rng [uint8 T per rank],
//   optimizer {name: T}, counters {name: float}; and with gradient
//   compression, rank_codec [{name: T} per rank] (absent without it); and
//   run_dir, the run directory of the run that wrote it (absent in
//   checkpoints written before 2026-12-06).
//
// Writes are atomic (temporary file, fsync, rename) and CheckpointDir
// updates its `latest` file only after the checkpoint is complete, so a
// crash at any moment leaves the previous checkpoint loadable and found.
// Beside each checkpoint that names its run directory, CheckpointDir keeps
// ckpt-<step>.pt.run with that name alone, so that telling whose a
// checkpoint is needs no read of its gigabytes.
//
// Thread-compatible; the trainer's thread on rank 0 writes, every rank reads.
#pragma once

#include "bigbatch/ckpt/atomic_file.h"

#include <torch/torch.h>

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace bigbatch {

using NamedTensors = std::vector<std::pair<std::string, torch::Tensor>>;

struct Checkpoint {
  static constexpr int64_t kVersion = 1;
  std::string config;      // resolved TOML of the run that wrote it
  std::string runDir;      // the absolute run directory of the run that wrote it; "": not said
  int64_t worldSize = 1;
  int64_t globalBatch = 0;
  int64_t epoch = 1;       // epoch to continue (1-based)
  int64_t stepInEpoch = 0; // optimizer steps already done in `epoch`
  int64_t globalStep = 0;  // optimizer steps done in all
  NamedTensors parameters;                // identical on every rank
  std::vector<NamedTensors> rankBuffers;  // per rank (BatchNorm statistics stay per rank)
  std::vector<torch::Tensor> rankRng;     // per rank: CPU generator state
  std::vector<NamedTensors> rankCodec;    // per rank: the gradient codec's state; empty: none
  NamedTensors optimizer;
  std::map<std::string, double> counters;
};

// The buffers a checkpoint's model evaluates with: rank 0's, or with
// `average` (train.average_bn_stats) the mean over its ranks of the
// floating-point ones where the ranks differ (a mid-epoch checkpoint; after
// an evaluation every rank holds the mean already, taken as it is).
NamedTensors evaluationBuffers(const Checkpoint& c, bool average);

// Serialised bytes and back. parseCheckpoint throws InvalidArgument naming
// `origin` and what is wrong (not a checkpoint, another version, a missing
// or mistyped field) — never crashes on arbitrary bytes.
std::vector<char> serializeCheckpoint(const Checkpoint& c);
Checkpoint parseCheckpoint(const std::vector<char>& bytes, const std::string& origin);

void writeCheckpoint(const Checkpoint& c, const std::string& path,
                     const WriteProgress& progress = {});  // atomic
Checkpoint readCheckpoint(const std::string& path);

// A directory of ckpt-<global step>.pt files, a `latest` file naming the
// newest complete one, and retention of the last `keep`.
class CheckpointDir {
 public:
  CheckpointDir(std::string dir, int keep);
  // Writes the checkpoint, then `latest`, then removes the older ones
  // beyond the newest `keep` — older meaning an earlier step than this
  // one's: a checkpoint of a later step is not this run's trajectory (a
  // resume from an earlier checkpoint left it), and is never removed in
  // favour of this one's. Returns the file written.
  std::string save(const Checkpoint& c, const WriteProgress& progress = {});
  // Removes every ckpt-*.pt (and `latest`, and a write's leftover .tmp)
  // here: a new run in the directory of an earlier one (--overwrite).
  // With `owner`, only the checkpoints that run directory wrote (a
  // ckpt.dir shared by runs keeps the others'), and `latest` only when it
  // names none of those left. Returns how many checkpoints it removed.
  int removeAll(const std::string& owner = "");
  // The run directories of the checkpoints here that `owner` did not write
  // ("" for a checkpoint that does not say), each once.
  std::vector<std::string> otherOwners(const std::string& owner) const;
  // The newest loadable checkpoint: the one `latest` names if it reads,
  // else the newest ckpt-*.pt that does (a crash mid-write leaves only a
  // .tmp file, which is ignored). nullopt when there is none.
  std::optional<std::string> latest() const;
  const std::string& dir() const { return dir_; }

 private:
  std::string dir_;
  int keep_;
};

}  // namespace bigbatch

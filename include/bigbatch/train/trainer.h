// The training loop: config -> data -> model -> epochs of forward, backward,
// gradient exchange, update -> evaluation -> stop at the target accuracy.
// Writes the run directory and the MLPerf log (time to accuracy = run_stop −
// run_start, initialisation included as MLPerf requires).
//
// One binary from 1 to N workers: the same call trains alone, under
// `mpirun -np N` (rank and size from MPI), or on any Communicator passed in
// TrainOptions. Only rank 0 prints and writes the run directory.
//
// Public API: a user hands the trainer a model (any ImageClassifierImpl, i.e.
// a torch::nn::Module with forward(images) -> logits), datasets and a config
// holding the optimizer recipe; examples/custom_model.cpp is a complete
// program. Every rank must build its model from the same seed.
//
// Runs on the calling thread; libtorch's intra-op pool does the parallel
// work and the DDP communication thread the exchange.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/common/config.h"
#include "bigbatch/common/logging.h"
#include "bigbatch/data/dataset.h"
#include "bigbatch/models/model_options.h"

namespace bigbatch {

// One optimizer step, as every rank sees it.
struct StepRecord {
  int64_t epoch = 0;
  int64_t step = 0;      // 1-based, across epochs
  double loss = 0;       // mean training loss of the global batch (NaN: step skipped)
  int64_t samples = 0;   // images in the global batch
  double lr = 0;
};

struct TrainOptions {
  std::string configPath;  // for run.name's default and the logs
  std::string runDir;      // overrides run.dir when non-empty
  bool overwrite = false;  // allow a run directory that already holds a run
  Verbosity verbosity = Verbosity::kNormal;
  // A state-dict file (model.pt of a run or `bigbatch export`) to start
  // from instead of the seed's initialisation; names and shapes must match
  // the model. Files written by Python's torch.save cannot be read
  // (libtorch 1.13's unpickler does not rebuild their OrderedDict; README).
  std::string initFrom;
  // Continue from a checkpoint: "auto" (this run's newest, or a fresh start
  // when there is none) or a checkpoint file or directory (resume.h).
  std::string resume;
  // Chrome-trace timeline of steps [timelineFirstStep, timelineLastStep]
  // (1-based, across epochs) written by rank 0 to this path; empty: none.
  std::string timelinePath;
  int64_t timelineFirstStep = 1;
  int64_t timelineLastStep = 100;
  // A Kineto profile (CPU operators, CUDA kernels and copies) of steps
  // [profileFirstStep, profileLastStep] (1-based, across epochs) written
  // by rank 0 to this path; empty: none. The CUDA build only
  // (bigbatch/train/step_profiler.h).
  std::string profilePath;
  int64_t profileFirstStep = 1;
  int64_t profileLastStep = 10;
  // Every micro-batch of an epoch is its first one, kept on the device:
  // the model's cost without the input's (`bigbatch bench step`). The
  // weights train on one batch: a benchmark, not a training run.
  bool residentBatch = false;
  // The ranks to train on; null: MPI's world when started by mpirun, else
  // this process alone.
  Communicator* comm = nullptr;
  // Called on every rank after every optimizer step (costs one small
  // collective per step for the global loss). Set it on every rank or on
  // none: the ranks check at the start and stop with a MismatchError
  // otherwise.
  std::function<void(const StepRecord&)> onStep;
  // Exchange the gradients through host mirrors, and under ddp.partition =
  // optimizer keep the slices there, as a model on a GPU without NCCL does
  // (DdpOptions::stageThroughHost) — on the CPU, for tests of that path.
  bool stageThroughHost = false;
};

// What a user may hand over instead of naming them in the config. Empty
// fields are built from the config (model.*, data.*).
struct TrainingJob {
  std::shared_ptr<ImageClassifierImpl> model;  // built after torch::manual_seed(run.seed)
  Dataset trainData;
  Dataset testData;
};

struct TrainResult {
  bool reachedTarget = false;
  double targetAccuracy = 0;
  double finalAccuracy = 0;  // top-1, fraction
  double bestAccuracy = 0;
  double finalTop5 = 0;
  double bestTop5 = 0;
  std::string targetMetric = "top1";  // what targetAccuracy applies to
  double timeToTargetS = -1;  // < 0 when not reached
  double trainTimeS = 0;      // run_start -> run_stop
  double throughputImgS = 0;  // training images per second, evaluation excluded
  // The last epoch of this invocation: its images per second (all ranks)
  // and its steps' wall time, evaluation excluded (the steady state of a
  // benchmark whose first epoch is its warm-up).
  double lastEpochImgS = 0;
  double lastEpochS = 0;
  int64_t lastEpochSteps = 0;
  int64_t epochs = 0;
  int64_t steps = 0;
  // train.stop_after_epoch ended this invocation before the epoch budget
  // (and the target did not end the run): `--resume auto` continues it.
  bool paused = false;
  // A stop asked from outside (SIGUSR1, common/stop_request.h) ended this
  // invocation at a step, checkpointed: no model.pt or summary.json yet;
  // `--resume auto` continues it.
  bool stopped = false;
  int64_t globalBatchSize = 0;
  int worldSize = 1;
  double firstLoss = 0;  // mean training loss of the first epoch
  double lastLoss = 0;   // mean training loss of the last epoch
  std::string runDir;    // empty on ranks other than 0
};

TrainResult train(const Config& config, const TrainOptions& options, TrainingJob job = {});

// What the ranks' set-up would refuse, checked once by a launcher before it
// starts `worldSize` ranks, so a user's mistake is one message instead of
// one per rank and an MPI abort: the data opens (validateTrainingData), a
// --resume checkpoint is found (when one is named) and fits this config and
// world size, the run directory does not already hold a run (without
// --overwrite or a resume), and an --init-from file is a state dict. Reads
// files, creates nothing; throws what the ranks would have.
void checkRunCanStart(const Config& config, const TrainOptions& options, int worldSize);

// The run directory a run with these options writes: --run-dir, else
// run.dir, else <run.out_dir>/<run name>-<UTC timestamp now> (a launcher
// that must name it before the ranks start: --max-restarts).
std::string plannedRunDir(const Config& config, const TrainOptions& options);

// With model.name = "torchscript": model.path loads as a TorchScript module
// a classifier can be (models/scripted_model.h) and maps one batch of the
// data's shape to logits of its classes. Nothing to check for the zoo's
// models. Reads files, creates nothing; checkRunCanStart calls it, and a
// single-process `bigbatch train` before it creates the run directory.
void checkModelLoads(const Config& config);

}  // namespace bigbatch

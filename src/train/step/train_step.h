// One optimizer step of data-parallel training, as the trainer runs it every
// step: for each of the accumulation micro-batches, data from the input
// pipeline, forward in BatchNorm groups (ghost batch norm), the loss, and
// backward (DDP exchanges each gradient bucket as backward fills it); then
// the wait for the exchange still in flight, and the update. A step the
// optimizer refuses (a non-finite gradient) is skipped or stops the run
// (train.nonfinite), the same way on every rank.
//
// With K-FAC, the first images of each step are tapped (models/layer_rows_tap.h), the
// step's factor statistics are summed over the ranks after the exchange, and
// the optimizer preconditions the averaged gradients before its update.
//
// The loss of each rank is its sum over its images divided by the images of
// the whole global batch, so the summed gradients are exactly the global
// batch's mean gradient — with accumulation and short last batches too.
//
// On a GPU the step never waits for the device (issue 55; StepSettings::
// deferOutcome): the loss scale lives in device memory and the optimizer's
// kernels update it (amp/loss_scale_rule.h), a refused step skips itself
// on the device, the loss and accuracy tallies add up on the device, and
// the step's outcome is read one step late — after the next step's
// backward is queued, when its event is long done (settle()). What still
// waits: a refused step reads back whether its loss was finite; the
// tallies are read at the end of an epoch, before a checkpoint and when a
// progress line is due (settleTally()); K-FAC's statistics, a codec whose
// memory follows the loss scale (PowerSGD), a partitioned optimizer and
// TrainOptions::onStep keep the synchronous form.
//
// Internal to src/train. run() is called by the training thread only.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <optional>
#include <string>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/data/input_pipeline.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/layer_rows_tap.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/train/timeline.h"
#include "step/device_feed.h"
#include "watch/fault_injection.h"
#include "watch/stall_guard.h"
#include "step/graph_bindings.h"
#include "step/step_graph.h"

namespace bigbatch::train_detail {

// Seconds this rank spent in each part of its steps (summed over an epoch):
// the step-time breakdown of metrics.csv.
struct StepTimes {
  double data = 0;       // waiting for the input pipeline
  double forward = 0;    // forward and loss
  double backward = 0;   // backward, buckets launched as they fill
  double comm = 0;       // exposed exchange: the wait after backward
  double optimizer = 0;  // the update (and a refused step's handling)
};

// This rank's training loss and accuracy sums (skipped micro-batches left out).
struct StepTally {
  double lossSum = 0;  // summed (smoothed) cross-entropy
  double correct = 0;  // top-1 hits
  double seen = 0;     // images
};

struct StepSettings {
  int64_t accumulation = 1;  // micro-batches per step
  int64_t groups = 1;        // BatchNorm groups per micro-batch (train.virtual_workers)
  double labelSmoothing = 0;
  Precision precision = Precision::kFp32;
  // Where the model is (run.device): each micro-batch is copied there from
  // the input pipeline's host memory.
  torch::Device device{torch::kCPU};
  bool skipNonFinite = false;  // train.nonfinite = skip
  // With K-FAC on (the optimizer's kfac()): images per rank and step whose
  // activations and output gradients feed the factors — the first ones of
  // the step's first micro-batch and BatchNorm group.
  int64_t kfacSamples = 128;
  // The GPU's form (see the header): outcomes read one step late, tallies
  // on the device. Set by the run where the step qualifies.
  bool deferOutcome = false;
  // run.cuda_graph: steps of `graphSamples` images (the full global batch)
  // replay one captured CUDA graph after kGraphWarmupSteps eager ones.
  bool cudaGraph = false;
  int64_t graphSamples = 0;
};

// Where a step sits: for messages, the heartbeat and the loss's divisor.
struct StepPosition {
  int64_t epoch = 1;
  int64_t stepInEpoch = 1;  // 1-based
  int64_t globalStep = 1;   // 1-based, across epochs
  int64_t samples = 0;      // images in this global batch (the last of an epoch may be short)
};

struct StepOutcome {
  // Whether `applied` is known: always in the synchronous form; deferred,
  // it is the outcome of the step settled during the call (the previous
  // one), and false when none was.
  bool settled = true;
  bool applied = true;  // false: skipped (non-finite gradient, or a loss-scale back-off)
  double lossSum = 0;   // this rank's summed loss over its images (0 when poisoned; synchronous only)
};

class TrainStep {
 public:
  // Every reference must outlive the TrainStep; timeline and scaler may be null.
  TrainStep(ImageClassifierImpl& model, DistributedDataParallel& ddp, JobCollectives& job,
            Optimizer& optimizer,
            DynamicLossScaler* scaler, StallGuard& guard, Timeline* timeline,
            FaultInjector& fault, int rank, StepSettings settings);

  // One optimizer step on the accumulation's micro-batches from `feed`.
  StepOutcome run(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                  StepTimes& times, StepTally& tally);

  bool deferred() const { return settings_.deferOutcome; }
  // Deferred: waits for the last launched step, handles it as run() would
  // have (a refused step skipped or stopping the run), and moves the device
  // tallies into `tally`. Returns that step's outcome (settled = false when
  // none was pending). Synchronous: nothing to do.
  StepOutcome settle(StepTally& tally);
  // Deferred: the device tallies into `tally` (one read-back, which waits
  // for the work queued so far).
  void settleTally(StepTally& tally);

 private:
  // A micro-batch's contribution to the tallies, kept on the device.
  struct MicroBatches {
    std::vector<torch::Tensor> sums;  // {loss sum, hits, images} per micro-batch, kDouble
    std::vector<double> sizes;
  };
  // The loss multiplier: the loss scale over the global batch's images, a
  // host value, or — deferred, with a loss scale — a device tensor.
  struct LossFactor {
    double value = 1;
    torch::Tensor onDevice;
  };
  // fault.kind = nan_input / nan: the step's images / losses made NaN.
  struct InjectedNan {
    bool input = false, loss = false;
  };
  // The step without a graph: forward, loss and backward of its
  // micro-batches (the first one `taken` already, when not null), then the
  // update and the tallies.
  StepOutcome runEager(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                       InjectedNan nan, bool tracing, StepTimes& times, StepTally& tally,
                       PipelineBatch* taken);
  MicroBatches forwardBackward(DeviceFeed& feed, const StepPosition& at, const LossFactor& factor,
                               InjectedNan nan, bool tracing, StepTimes& times,
                               PipelineBatch* taken);
  torch::Tensor forward(const torch::Tensor& images, LayerTap* tap);
  torch::Tensor lossOf(torch::Tensor logits, const torch::Tensor& labels, const LossFactor& factor,
                       bool nanLoss, MicroBatches& m);
  torch::Tensor lossFactorOnDevice(int64_t samples);
  torch::Tensor addToTally(const MicroBatches& m, bool injectNan);
  // run.cuda_graph: a replay of the captured step (captured the first time).
  StepOutcome runGraphed(DeviceFeed& feed, const StepPosition& at, const StepHyper& hyper,
                         bool tracing, StepTimes& times, StepTally& tally);
  void captureStep(const StepPosition& at);
  // The tensors a captured step reads and writes besides its own pool: the
  // parameters, the model's buffers, the optimizer's state, the static
  // input and the tallies.
  GraphBindings::Named graphTensors() const;
  // The synchronous and the deferred end of a step: the update and the
  // tallies.
  StepOutcome finishNow(const MicroBatches& m, const StepPosition& at, const StepHyper& hyper,
                        double lossFactor, bool injectNan,
                        const std::vector<torch::Tensor>& buffersBefore, StepTally& tally);
  StepOutcome finishDeferred(const MicroBatches& m, const StepPosition& at,
                             const StepHyper& hyper, bool injectNan,
                             const std::vector<torch::Tensor>& buffersBefore);
  StepOutcome settlePending();
  void skipOrStopSettled(bool poisoned, const StepPosition& at, double scaleBefore);

  // After a refused step: the loss scaler backs off (false), or the run
  // skips the step (true) or stops (an Error naming where). Every rank
  // comes here together.
  bool skipOrStop(bool poisoned, const StepPosition& at);
  void stopOrWarn(const StepPosition& at, const std::string& where, const char* late);
  void updateScale(bool finite);
  // The model's buffers (BatchNorm statistics) back to `before`.
  void restoreBuffers(const std::vector<torch::Tensor>& before);

  ImageClassifierImpl& model_;
  DistributedDataParallel& ddp_;
  JobCollectives& job_;
  Optimizer& optimizer_;
  DynamicLossScaler* scaler_;
  StallGuard& guard_;
  Timeline* timeline_;
  FaultInjector& fault_;
  const int rank_;
  const StepSettings settings_;
  std::unique_ptr<LayerRowsTap> kfacTap_;  // feeds K-FAC; null without it
  // Deferred: the step launched last, until settled, and the tallies of the
  // micro-batches with a finite loss since the last settleTally() (loss
  // sum, hits, images; kDouble on the device).
  struct Pending {
    StepPosition at;
    torch::Tensor poisoned;  // bool, on the device: a micro-batch's loss was not finite
    bool injectedNan = false;
  };
  std::optional<Pending> pending_;
  torch::Tensor tally_;
  // run.cuda_graph: the graph, its static input, the gradients and the
  // poisoned flag each replay writes, and the eager steps so far (cuDNN
  // chooses its algorithms in them, before the capture).
  static constexpr int64_t kGraphWarmupSteps = 3;
  std::unique_ptr<StepGraph> graph_;
  torch::Tensor staticImages_, staticLabels_, graphPoisoned_;
  std::vector<torch::Tensor> staticGrads_;
  // What the graph was captured with, checked before each replay.
  GraphBindings graphBindings_;
  int64_t eagerSteps_ = 0;
};

// Forward in `groups` BatchNorm groups (ghost batch norm): every layer but
// BatchNorm treats samples independently, so running the groups one after
// another gives each its own batch statistics and changes nothing else.
// `tap` (may be null) sees the first group's layers.
torch::Tensor forwardGroups(ImageClassifierImpl& model, const torch::Tensor& images, int64_t groups,
                            LayerTap* tap = nullptr);

}  // namespace bigbatch::train_detail

// RunComponents: every part of one training run on one rank, as set-up
// (run_setup.h) builds them and the epoch loop (epoch_loop.h) uses them.
// The members are declared in set-up order — ranks, recipe, threads, data,
// model, exchange, restored state, optimization, input, checkpoints, step —
// so each part is destroyed before the parts it refers to (the exchange's
// communication thread before the communicator, the step before the
// exchange).
//
// Internal to src/train. Not copyable or movable: parts hold references
// to one another (the checkpointer to `config`, the exchange to `model`).
// Threading: the training thread.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "bigbatch/common/config.h"
#include "bigbatch/data/gpu_jpeg_pipeline.h"
#include "watch/fault_injection.h"
#include "recipe/recipe.h"
#include "run/run_start.h"
#include "run/run_state.h"
#include "training_data.h"

// The parts recipe.h does not already declare.
namespace bigbatch {
class PiecewiseLinear;
}  // namespace bigbatch

namespace bigbatch::train_detail {

class RunCheckpointer;
struct NcclLink;

// Intra-op threads of this rank, and the fewest CPUs any rank may run on.
struct RunThreads {
  int64_t perRank = 1;
  int64_t fewestAllowedCpus = 1;
};

// The gradient exchange and what watches it. In this order: the stall
// guard outlives the exchange it watches, the NCCL link and the job's
// communication thread outlive the DDP that uses them.
struct RunExchange {
  std::unique_ptr<Timeline> timeline;  // --timeline
  std::unique_ptr<StallGuard> stallGuard;
  std::unique_ptr<NcclLink> nccl;  // ddp.gpu_exchange = nccl
  std::unique_ptr<JobCollectives> job;
  std::unique_ptr<DistributedDataParallel> ddp;
};

// The optimizer and what sets its inputs each step.
struct RunOptimization {
  std::unique_ptr<Optimizer> optimizer;
  std::optional<KfacCoverage> kfacCoverage;   // with optim.kfac
  std::unique_ptr<DynamicLossScaler> scaler;  // with amp.loss_scale = dynamic
  std::unique_ptr<LrSchedule> lr;
  std::unique_ptr<PiecewiseLinear> momentum;
  std::unique_ptr<BatchSchedule> batch;
};

// The training input: the source, its augmentation and the pipeline.
struct RunInput {
  std::shared_ptr<const ImageSource> source;
  ImageAugment augment;
  PipelineOptions pipeline;
  std::shared_ptr<DecodedCache> cache;  // data.cache_mb
  // data.transfer: training batches as uint8 pixels (PipelineOptions::
  // uint8Batches), normalised by the device feed into `inputType`.
  bool uint8Transfer = false;
  torch::ScalarType inputType = torch::kFloat;
  // data.decode = "gpu": the nvJPEG decoder and its settings, which every
  // epoch's GpuJpegPipeline and evaluation use instead of the pipeline.
  std::shared_ptr<const GpuDecodeSettings> gpu;
};

struct RunComponents {
  explicit RunComponents(const Config& config);
  ~RunComponents();
  RunComponents(const RunComponents&) = delete;
  RunComponents& operator=(const RunComponents&) = delete;

  Config config;     // a resume on another world size adjusts the accumulation steps
  RunStart start;    // the ranks, this rank's device, the run directory, the resume point
  bool lead = true;  // rank 0
  RunRecipe recipe;
  RunThreads threads;
  TrainingData data;
  std::shared_ptr<ImageClassifierImpl> model;
  RunExchange exchange;
  RunState state;            // the run's position and totals (a resume's, restored)
  double elapsedBefore = 0;  // run seconds of the sessions before a resume
  RunOptimization optimization;
  RunInput input;
  std::unique_ptr<FaultInjector> fault;  // fault.*
  std::unique_ptr<RunCheckpointer> checkpointer;
  std::unique_ptr<TrainStep> step;
};

}  // namespace bigbatch::train_detail

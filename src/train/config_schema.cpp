#include "bigbatch/train/config_schema.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "bigbatch/amp/loss_scaler.h"
#include "bigbatch/amp/precision.h"
#include "bigbatch/collectives/allreduce_selector.h"
#include "bigbatch/common/error.h"
#include "gpu_exchange.h"
#include "recipe.h"
#include "run_device.h"
#include "training_data.h"

namespace bigbatch {
namespace {

using T = ConfigType;
using L = std::vector<int64_t>;
constexpr double kInf = std::numeric_limits<double>::infinity();

ConfigField F(std::string key, T type, ConfigValue def, std::string help,
              std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt,
              std::vector<std::string> choices = {}) {
  return ConfigField{std::move(key),    type, std::move(def), std::move(help), min, max,
                     std::move(choices)};
}

}  // namespace

namespace {

// run.*: where the run lives, its seed, threads and workers.
std::vector<ConfigField> runKeys() {
  return {
      F("run.name", T::kString, std::string(""), "run name; empty: the config file's stem"),
      F("run.dir", T::kString, std::string(""),
        "run directory; empty: <run.out_dir>/<run.name>-<UTC timestamp>"),
      F("run.out_dir", T::kString, std::string("runs"),
        "parent of automatically named run directories"),
      F("run.seed", T::kInt, int64_t{1}, "seed of initialisation, data order and augmentation", 0.0,
        4294967295.0),
      F("run.threads", T::kInt, int64_t{0},
        "compute threads per rank; 0: the CPUs this rank may run on / the ranks of its host "
        "that share them",
        0.0, 1024.0),
      F("run.device", T::kString, std::string("cpu"),
        "where each rank computes: cpu, or cuda (rank r uses GPU r mod the GPUs of its host; "
        "needs the CUDA build, docs/GPU.md)",
        {}, {}, {"cpu", "cuda"}),
      F("run.workers", T::kInt, int64_t{1},
        "ranks to start on this machine (bigbatch runs mpirun itself); ignored under mpirun, "
        "where MPI gives the world size",
        1.0, 4096.0),
  };
}

// data.*: the data set, its augmentation and the input pipeline.
std::vector<ConfigField> dataKeys() {
  return {
      F("data.dataset", T::kString, std::string("fashion-mnist"),
        "training data: fashion-mnist (IDX files), cifar10 (the binary version), folder "
        "(ImageNet-style class folders of JPEGs) or synthetic",
        {}, {}, {"fashion-mnist", "cifar10", "folder", "synthetic"}),
      F("data.path", T::kString, std::string(""),
        "fashion-mnist: the IDX directory (empty: /usr/share/datasets/fashion-mnist); cifar10: "
        "the folder of data_batch_1..5.bin and test_batch.bin; folder: a root with train/ and "
        "val/"),
      F("data.train_dir", T::kString, std::string(""),
        "folder: the training split, one sub-folder of JPEGs per class (empty: data.path/train)"),
      F("data.val_dir", T::kString, std::string(""),
        "folder: the validation split, the same class sub-folders (empty: data.path/val)"),
      F("data.train_samples", T::kInt, int64_t{0},
        "use only N training samples: the first N (fashion-mnist, synthetic), or N spread "
        "evenly over the set (cifar10, folder: a class-sorted folder keeps every class); 0: all",
        0.0, kInf),
      F("data.eval_samples", T::kInt, int64_t{0},
        "use only N test samples, chosen as data.train_samples; 0: all", 0.0, kInf),
      F("data.synthetic_shape", T::kIntList, std::vector<int64_t>{1, 28, 28},
        "synthetic: [channels, height, width] of its images (e.g. [3, 224, 224] for "
        "ImageNet-sized throughput benchmarks)"),
      F("data.synthetic_classes", T::kInt, int64_t{10}, "synthetic: number of classes", 2.0,
        100000.0),
      F("data.flip", T::kBool, true, "random horizontal flip"),
      F("data.pad_crop", T::kInt, int64_t{0}, "pad by N pixels and crop back at a random offset",
        0.0, 8.0),
      F("data.random_resized_crop", T::kBool, true,
        "folder: train on random-resized crops (Szegedy et al. 2015) of data.crop_scale and "
        "data.crop_ratio, resized to model.image_size; false: the whole image resized"),
      F("data.crop_scale", T::kFloatList, std::vector<double>{0.08, 1.0},
        "folder: [min, max] area of a random-resized crop, fraction of the image", 0.0, 1.0),
      F("data.crop_ratio", T::kFloatList, std::vector<double>{3.0 / 4.0, 4.0 / 3.0},
        "folder: [min, max] aspect ratio (width / height) of a random-resized crop", 0.0, 100.0),
      F("data.eval_crop", T::kFloat, 0.875,
        "folder: validation takes the centred crop of this fraction of the shorter side, "
        "resized to model.image_size (0.875: resize 256, crop 224); 1: the whole image",
        0.01, 1.0),
      F("data.cache_mb", T::kInt, int64_t{0},
        "keep up to N MiB of decoded training images across epochs (later epochs skip reading "
        "and decoding them); 0: none",
        0.0, 1048576.0),

      F("data.read_threads", T::kInt, int64_t{0},
        "input pipeline: threads that read samples; 0 (with decode_threads and augment_threads "
        "0): inline, each micro-batch assembled on the training thread when it is needed",
        0.0, 256.0),
      F("data.decode_threads", T::kInt, int64_t{0}, "input pipeline: threads that decode samples",
        0.0, 256.0),
      F("data.augment_threads", T::kInt, int64_t{0},
        "input pipeline: threads that augment samples into batches", 0.0, 256.0),
      F("data.prefetch_batches", T::kInt, int64_t{4},
        "input pipeline: micro-batches prepared ahead of training", 1.0, 1024.0),
      F("data.bad_samples", T::kString, std::string("skip"),
        "an unreadable or corrupt sample: skip (log its path, count it, leave it out) or fail", {},
        {}, {"skip", "fail"}),
  };
}

// model.*: the architecture and its BatchNorm.
std::vector<ConfigField> modelKeys() {
  return {
      F("model.name", T::kString, std::string("cnn"), "architecture", {}, {},
        {"cnn", "resnet", "resnet50"}),
      F("model.widths", T::kIntList, L{16, 32, 64}, "channels of each stage", 1.0, 4096.0),
      F("model.blocks", T::kIntList, L{2, 2, 1},
        "conv layers (cnn) or residual blocks (resnet) per stage", 1.0, 64.0),
      F("model.bn_momentum", T::kFloat, 0.1,
        "BatchNorm running-statistics momentum (PyTorch convention)", 0.0, 1.0),
      F("model.bn_eps", T::kFloat, 1e-5, "BatchNorm epsilon", 1e-12, 1.0),
      F("model.zero_init_residual", T::kBool, true, "zero γ of each residual block's last BN"),
      F("model.hidden", T::kInt, int64_t{0},
        "cnn: width of a hidden fully-connected layer before fc (0: none); 350000 gives "
        "ResNet-50's 25.6 M gradient values for little compute (the exchange-bound benchmark)",
        0.0, 1e8),
      F("model.head_pool", T::kInt, int64_t{1},
        "cnn: the classifier reads the last stage's features average-pooled to N x N "
        "(N*N*width inputs: where features are, not only which); 1: global average pooling",
        1.0, 64.0),
      F("model.image_size", T::kInt, int64_t{0},
        "side of the images the model sees; 0: the data's own (28 Fashion-MNIST, 32 CIFAR-10), "
        "224 for folders (which are resized to it)",
        0.0, 4096.0),
      F("model.channels_last", T::kBool, true,
        "NHWC memory format (faster oneDNN convolutions on CPU)"),
  };
}

// train.*: batch, epochs, target, evaluation, loss.
std::vector<ConfigField> trainKeys() {
  return {
      F("train.batch_size", T::kInt, int64_t{128},
        "images per rank per micro-batch; global batch = ranks x batch_size x accumulation_steps",
        1.0, 1048576.0),
      F("train.accumulation_steps", T::kInt, int64_t{1},
        "micro-batches whose gradients are summed before each update", 1.0, 4096.0),
      F("train.virtual_workers", T::kInt, int64_t{1},
        "BatchNorm groups per micro-batch (ghost batch norm): each group of batch_size / V "
        "images gets its own batch statistics, as on ranks x V real workers",
        1.0, 65536.0),
      F("train.average_bn_stats", T::kBool, true,
        "BatchNorm running statistics for evaluation and model.pt: their mean over the ranks "
        "(true), or rank 0's (false); either way the accuracy reported is that of model.pt"),
      F("train.epochs", T::kInt, int64_t{10}, "epoch budget", 1.0, 100000.0),
      F("train.target_accuracy", T::kFloat, 0.92,
        "test accuracy (fraction, of train.target_metric) that ends the run", 0.0, 1.0),
      F("train.target_metric", T::kString, std::string("top1"),
        "the accuracy train.target_accuracy applies to: top1, or top5 (MoXing's DAWNBench "
        "target was 93 % top-5)",
        {}, {}, {"top1", "top5"}),
      F("train.stop_at_target", T::kBool, true, "stop as soon as the target is reached"),
      F("train.stop_after_epoch", T::kInt, int64_t{0},
        "end this invocation after epoch N, evaluated and checkpointed, as if interrupted there "
        "(summary.json: paused); the schedules still span train.epochs and `--resume auto` "
        "continues the run. `bigbatch tune` stops trials at its rungs this way. 0: never",
        0.0, 100000.0),
      F("train.eval_every", T::kInt, int64_t{1}, "evaluate every N epochs (and after the last)",
        1.0, 100000.0),
      F("train.eval_flip", T::kBool, false,
        "test-time augmentation: classify each test image by the mean softmax of it and its "
        "mirror image (one more forward pass per image; reported accuracies include it)"),
      F("train.eval_batch_size", T::kInt, int64_t{1000}, "images per evaluation forward pass", 1.0,
        1048576.0),
      F("train.label_smoothing", T::kFloat, 0.0, "label smoothing α: target (1-α)·onehot + α/K",
        0.0, 0.999),

      F("train.nonfinite", T::kString, std::string("stop"),
        "a non-finite loss or gradient: stop (fail naming the step and tensor) or skip the step "
        "(weights untouched, counted in metrics.csv)",
        {}, {}, {"stop", "skip"}),
  };
}

// ckpt.*: checkpoints.
std::vector<ConfigField> ckptKeys() {
  return {
      F("ckpt.every_epochs", T::kInt, int64_t{1},
        "write a checkpoint every N epochs (and at the end); 0: only at the end", 0.0, 100000.0),
      F("ckpt.every_steps", T::kInt, int64_t{0},
        "also write one every N optimizer steps (mid-epoch); 0: off", 0.0, 1e12),
      F("ckpt.keep", T::kInt, int64_t{2}, "checkpoints kept (the newest)", 1.0, 100000.0),
      F("ckpt.dir", T::kString, std::string(""),
        "checkpoint directory; empty: <run directory>/checkpoints"),
  };
}

// fault.*: fault injection (tests and docs/RELIABILITY.md).
std::vector<ConfigField> faultKeys() {
  return {
      F("fault.kind", T::kString, std::string("none"),
        "fault injection for tests: at optimizer step fault.step, rank fault.rank throws, "
        "aborts, SIGKILLs itself, hangs, gets a NaN loss (nan) or a NaN batch (nan_input)",
        {}, {}, {"none", "throw", "abort", "sigkill", "hang", "nan", "nan_input"}),
      F("fault.rank", T::kInt, int64_t{0}, "rank that injects the fault", 0.0, 1e6),
      F("fault.step", T::kInt, int64_t{1}, "1-based optimizer step at which the fault fires", 1.0,
        1e12),
  };
}

// ddp.*: the gradient exchange.
std::vector<ConfigField> ddpKeys() {
  return {
      F("ddp.fusion_bytes", T::kInt, int64_t{1} << 20,
        "gradient bytes per exchange bucket (buckets are sent as soon as backward fills them); "
        "\"auto\" (or 0): time 16 KiB, 64 KiB, ... x4 up to one bucket over the first steps (5 "
        "each) and keep the fastest by the slowest rank; 1 MiB with ddp.partition = optimizer",
        0.0, 1073741824.0, {"auto"}),
      F("ddp.exchange_dtype", T::kString, std::string("fp32"),
        "gradient type on the wire: fp16/bf16 halve the bytes (pre-divided by the world size, "
        "summed in fp32, written back to fp32 gradients)",
        {}, {}, {"fp32", "fp16", "bf16"}),
      F("ddp.overlap", T::kBool, true,
        "exchange each bucket during backward; false: all buckets after backward"),
      F("ddp.partition", T::kString, std::string("none"),
        "optimizer: partitioned optimizer state (ZeRO-1) - gradients reduce-scattered, each rank "
        "updates and keeps state for 1/N of every bucket, weights all-gathered (run.device = "
        "cuda: through host memory, the slices and their optimizer on the host); none: "
        "allreduce",
        {}, {}, {"none", "optimizer"}),
      F("ddp.gpu_exchange", T::kString, std::string("auto"),
        "run.device = cuda on 2+ ranks: nccl (buckets summed by NCCL on the GPUs; every rank "
        "needs a GPU of its own), host (through pinned host memory and the host collectives), "
        "auto: nccl where the build has NCCL, no two ranks share a GPU and ddp.partition = "
        "none, else host",
        {}, {}, {"auto", "nccl", "host"}),
  };
}

// amp.*: mixed precision and loss scaling.
std::vector<ConfigField> ampKeys() {
  return {
      F("amp.precision", T::kString, std::string("fp32"),
        "compute type: bf16/fp16 run convolutions and matmuls in 16 bits (autocast) on copies of "
        "the fp32 master weights; fp16 needs run.device = cuda and is refused on CPU (libtorch "
        "1.13's CPU autocast is bf16 only)",
        {}, {}, {"fp32", "bf16", "fp16"}),
      F("amp.tf32", T::kBool, true,
        "run.device = cuda: fp32 matmuls and convolutions on TF32 tensor cores (PyTorch's "
        "default for convolutions); false: full fp32"),
      F("amp.loss_scaling", T::kString, std::string("auto"),
        "dynamic loss scaling: auto (on with fp16 compute or ddp.exchange_dtype = fp16), on, off",
        {}, {}, {"auto", "on", "off"}),
      F("amp.init_scale", T::kFloat, 65536.0, "initial loss scale", 1e-30, 3e38),
      F("amp.growth_interval", T::kInt, int64_t{2000},
        "clean steps in a row after which the loss scale doubles", 1.0, 1e12),
      F("amp.growth_factor", T::kFloat, 2.0, "loss-scale growth factor", 1.0, 1e6),
      F("amp.backoff_factor", T::kFloat, 0.5,
        "loss-scale factor after an overflowing step (the step is skipped)", 1e-6, 1.0),
      F("amp.min_scale", T::kFloat, 1.0,
        "loss-scale floor; an overflow at the floor is a divergence (train.nonfinite decides)",
        1e-30, 3e38),
      F("amp.max_scale", T::kFloat, 16777216.0, "loss-scale ceiling (2^24)", 1e-30, 3e38),
      F("amp.hysteresis", T::kInt, int64_t{1},
        "overflowing steps (since the last change) before the scale backs off", 1.0, 1e6),
  };
}

// comm.*: the collectives and their deadline.
std::vector<ConfigField> commKeys() {
  return {
      F("comm.allreduce", T::kString, std::string("auto"),
        "allreduce algorithm; auto: by message size and topology", {}, {},
        {"auto", "shm", "hierarchical", "ring", "halving_doubling", "recursive_doubling", "mpi"}),
      F("comm.allreduce_table", T::kString, std::string(""),
        "rules for auto, e.g. \"64K:recursive_doubling,shm\"; empty: the built-in table"),
      F("comm.allreduce_tune", T::kBool, true,
        "auto: time the table's choice, ring and MPI_Allreduce on the first calls of each size "
        "and keep the fastest; false: the table alone (the same algorithm, and so the same fp32 "
        "summation order past 2 ranks, in every run)"),
      F("comm.timeout_s", T::kFloat, 60.0,
        "seconds a rank waits for a peer before failing with an error naming it", 0.1, 86400.0),
  };
}

// optim.*: the optimizer and K-FAC.
std::vector<ConfigField> optimKeys() {
  return {
      F("optim.name", T::kString, std::string("sgd"),
        "optimizer: sgd (momentum, Nesterov), lars (You et al. 2017), lamb (You et al. 2019)", {},
        {}, {"sgd", "lars", "lamb"}),
      F("optim.lr", T::kFloat, 0.1, "peak learning rate at the global batch", 0.0, 1e6),
      F("optim.lr_per_256", T::kFloat, 0.0,
        "when > 0, the peak lr is lr_per_256 x global batch / 256 (linear scaling rule) and "
        "optim.lr is ignored",
        0.0, 1e6),
      F("optim.momentum", T::kFloat, 0.9, "momentum (sgd, lars)", 0.0, 0.999999),
      F("optim.nesterov", T::kBool, true, "Nesterov momentum (sgd)"),
      F("optim.weight_decay", T::kFloat, 5e-4,
        "weight decay of regular parameters (L2 for sgd "
        "and lars, decoupled lambda for lamb)",
        0.0, 1.0),
      F("optim.exclude_bn_bias", T::kBool, true,
        "BatchNorm parameters and biases form the excluded group: no trust ratio, "
        "optim.excluded_weight_decay and optim.excluded_lr_scale"),
      F("optim.exclude_pattern", T::kString, std::string(""),
        "regex searched in parameter names (e.g. \"bn|bias\") that selects the excluded group; "
        "empty: every tensor of rank <= 1"),
      F("optim.excluded_lr_scale", T::kFloat, 1.0, "lr multiplier of excluded parameters", 0.0,
        1e6),
      F("optim.excluded_weight_decay", T::kFloat, 0.0, "weight decay of excluded parameters", 0.0,
        1.0),
      F("optim.lars_eta", T::kFloat, 0.001, "LARS trust coefficient eta", 1e-12, 1e6),
      F("optim.lars_epsilon", T::kFloat, 0.0, "LARS epsilon in the trust denominator", 0.0, 1.0),
      F("optim.beta1", T::kFloat, 0.9, "LAMB first-moment decay", 0.0, 0.999999),
      F("optim.beta2", T::kFloat, 0.999, "LAMB second-moment decay", 0.0, 0.999999),
      F("optim.epsilon", T::kFloat, 1e-6, "LAMB epsilon", 1e-30, 1.0),
      F("optim.lamb_phi_min", T::kFloat, 0.0, "LAMB: lower clip of the trust numerator phi(|w|)",
        0.0, 1e6),
      F("optim.lamb_phi_max", T::kFloat, 0.0, "LAMB: upper clip of phi(|w|); 0: no upper clip", 0.0,
        1e6),
      F("optim.fused", T::kBool, true,
        "fused multi-tensor norm and update passes (CPU fp32); false: per-tensor ATen calls"),
      F("optim.kfac", T::kBool, false,
        "K-FAC directions (Martens & Grosse 2015): the gradients of the regular linear and "
        "convolution weights are preconditioned by the layers' Kronecker-factored curvature, "
        "rescaled to the gradient's norm, before the optimizer (any of them) applies them"),
      F("optim.kfac_damping", T::kFloat, 0.03,
        "K-FAC: damping added to each factor, relative to its mean eigenvalue", 1e-12, 1e6),
      F("optim.kfac_decay", T::kFloat, 0.95,
        "K-FAC: running average of the factors, F = decay*F + (1 - decay)*F_step", 0.0, 0.999999),
      F("optim.kfac_inverse_interval", T::kInt, int64_t{1},
        "K-FAC: steps between re-inversions of the damped factors", 1.0, 1e6),
      F("optim.kfac_max_dim", T::kInt, int64_t{1024},
        "K-FAC: cover a layer only when both its factors (in*kh*kw and out) are at most N x N; "
        "larger layers keep their plain gradient. A covered layer costs in*kh*kw squared plus "
        "out squared values of statistics summed over the ranks every step",
        1.0, 65536.0),
      F("optim.kfac_samples", T::kInt, int64_t{128},
        "K-FAC: images per rank and step whose activations and output gradients feed the "
        "factors (the first of the step's first BatchNorm group)",
        1.0, 1e9),
  };
}

// schedule.*: learning-rate, momentum and batch-size schedules.
std::vector<ConfigField> scheduleKeys() {
  return {
      F("schedule.warmup_epochs", T::kFloat, 0.5, "linear warmup length in epochs (fractional)",
        0.0, 100000.0),
      F("schedule.warmup_start_factor", T::kFloat, 0.0, "lr at step 0 as a fraction of the peak lr",
        0.0, 1.0),
      F("schedule.decay", T::kString, std::string("cosine"), "decay after warmup", {}, {},
        {"cosine", "poly", "step", "constant"}),
      F("schedule.end_lr", T::kFloat, 0.0, "lr at the end of the epoch budget (cosine, poly)", 0.0,
        1e6),
      F("schedule.poly_power", T::kFloat, 2.0, "power of the polynomial decay", 0.0, 100.0),
      F("schedule.step_epochs", T::kIntList, L{}, "epochs at which step decay multiplies the lr",
        0.0, 100000.0),
      F("schedule.step_gamma", T::kFloat, 0.1, "factor of each step decay", 0.0, 1.0),
      F("schedule.momentum_epochs", T::kFloatList, std::vector<double>{},
        "momentum schedule: epoch positions of schedule.momentum_values (linear in between, "
        "constant outside); empty: optim.momentum throughout",
        0.0, 100000.0),
      F("schedule.momentum_values", T::kFloatList, std::vector<double>{},
        "momentum at each of schedule.momentum_epochs", 0.0, 0.999999),
      F("schedule.weight_decay_follows_lr", T::kBool, false,
        "scale weight decay by lr / peak lr at every step"),
      F("schedule.batch_epochs", T::kIntList, L{},
        "batch-size schedule: from these (1-based) epochs on, the per-rank batch is multiplied by "
        "schedule.batch_factors",
        1.0, 100000.0),
      F("schedule.batch_factors", T::kIntList, L{},
        "batch multiplier from each of "
        "schedule.batch_epochs on",
        1.0, 65536.0),
      F("schedule.batch_lr_rule", T::kString, std::string("linear"),
        "how the lr follows a batch-size factor k: linear (x k), sqrt (x sqrt(k)), none", {}, {},
        {"linear", "sqrt", "none"}),
  };
}

// mlperf.*: the MLPerf log's submission keys.
std::vector<ConfigField> mlperfKeys() {
  return {
      F("mlperf.submission_benchmark", T::kString, std::string("resnet"),
        "MLPerf benchmark whose key set the log follows"),
      F("mlperf.submission_org", T::kString, std::string("bigbatch"), "MLPerf submission_org"),
      F("mlperf.submission_division", T::kString, std::string("open"), "MLPerf submission_division",
        {}, {}, {"open", "closed"}),
      F("mlperf.submission_status", T::kString, std::string("onprem"), "MLPerf submission_status",
        {}, {}, {"onprem", "cloud", "research", "preview", "available"}),
      F("mlperf.submission_platform", T::kString, std::string(""),
        "MLPerf submission_platform; empty: <ranks>x<cpu model>"),
  };
}

}  // namespace

std::vector<ConfigField> trainingConfigSchema() {
  std::vector<ConfigField> all;
  for (auto section : {runKeys, dataKeys, modelKeys, trainKeys, ckptKeys, faultKeys, ddpKeys,
                       ampKeys, commKeys, optimKeys, scheduleKeys, mlperfKeys}) {
    for (auto& field : section()) all.push_back(std::move(field));
  }
  return all;
}

Config defaultTrainingConfig() {
  Config c(trainingConfigSchema());
  c.ignoreTable("tune");  // a recipe's search space, read by `bigbatch tune`
  return c;
}

void validateTrainingConfig(const Config& c) {
  const auto widths = c.getIntList("model.widths");
  const auto blocks = c.getIntList("model.blocks");
  if (c.getInt("model.head_pool") > 1 && c.getString("model.name") != "cnn") {
    BIGBATCH_THROW(InvalidArgument,
                   "model.head_pool = {} applies to model.name = cnn only (got {}); leave it 1",
                   c.getInt("model.head_pool"), c.getString("model.name"));
  }
  if (c.getInt("model.hidden") > 0 && c.getString("model.name") != "cnn") {
    BIGBATCH_THROW(InvalidArgument, "model.hidden = {} applies to model.name = cnn only (got {})",
                   c.getInt("model.hidden"), c.getString("model.name"));
  }
  if (c.getString("model.name") != "resnet50" &&
      (widths.empty() || widths.size() != blocks.size())) {
    BIGBATCH_THROW(InvalidArgument,
                   "model.widths has {} stages and model.blocks {}; give both, of equal length",
                   widths.size(), blocks.size());
  }
  if (c.getInt("train.batch_size") < c.getInt("train.virtual_workers")) {
    BIGBATCH_THROW(InvalidArgument,
                   "train.virtual_workers = {} exceeds train.batch_size = {}: each BatchNorm "
                   "group needs at least one image; lower train.virtual_workers",
                   c.getInt("train.virtual_workers"), c.getInt("train.batch_size"));
  }
  if (!c.getString("comm.allreduce_table").empty()) {
    parseAllreduceRules(c.getString("comm.allreduce_table"));  // throws naming the bad entry
  }
  if (c.getFloatList("schedule.momentum_epochs").size() !=
      c.getFloatList("schedule.momentum_values").size()) {
    BIGBATCH_THROW(InvalidArgument,
                   "schedule.momentum_epochs has {} entries and schedule.momentum_values {}; give "
                   "one value per epoch",
                   c.getFloatList("schedule.momentum_epochs").size(),
                   c.getFloatList("schedule.momentum_values").size());
  }
  if (c.getIntList("schedule.batch_epochs").size() !=
      c.getIntList("schedule.batch_factors").size()) {
    BIGBATCH_THROW(InvalidArgument,
                   "schedule.batch_epochs has {} entries and schedule.batch_factors {}; give one "
                   "factor per epoch",
                   c.getIntList("schedule.batch_epochs").size(),
                   c.getIntList("schedule.batch_factors").size());
  }
  {
    const int64_t r = c.getInt("data.read_threads"), d = c.getInt("data.decode_threads"),
                  a = c.getInt("data.augment_threads");
    if ((r == 0 || d == 0 || a == 0) && (r + d + a) != 0) {
      BIGBATCH_THROW(InvalidArgument,
                     "data.read_threads = {}, data.decode_threads = {}, data.augment_threads = {}: "
                     "set all three >= 1 (threaded pipeline) or all 0 (inline)",
                     r, d, a);
    }
  }
  // run.device first: "cuda" is refused before any worker starts by a CPU
  // build, or where no GPU is visible.
  const bool onCuda = c.getString("run.device") == "cuda";
  if (onCuda) train_detail::checkCudaAvailable();
  if (c.getString("amp.precision") == "fp16") {
    checkPrecisionSupported(Precision::kFp16,
                            onCuda ? c10::DeviceType::CUDA : c10::DeviceType::CPU);
  }
  if (c.getString("ddp.gpu_exchange") == "nccl") {
    BIGBATCH_REQUIRE(onCuda, InvalidArgument,
                     "ddp.gpu_exchange = \"nccl\" sums gradients on GPUs, but run.device = "
                     "\"{}\"; set run.device = \"cuda\", or ddp.gpu_exchange = \"auto\"",
                     c.getString("run.device"));
    train_detail::checkNcclBuilt();
  }
  if (c.getString("ddp.partition") == "optimizer") {
    train_detail::checkPartitionedExchange(c.getString("ddp.gpu_exchange"));
  }
  if (c.getString("amp.loss_scaling") != "off") {
    DynamicLossScaler check(train_detail::lossScalerOptions(c));  // throws naming the bad option
  }
  if (const int64_t fusion = c.getInt("ddp.fusion_bytes"); fusion > 0 && fusion < 4) {
    BIGBATCH_THROW(InvalidArgument,
                   "ddp.fusion_bytes = {} holds no float: give at least 4 bytes, or \"auto\"",
                   fusion);
  }
  if (c.getString("ddp.partition") == "optimizer") {
    if (c.getBool("optim.kfac")) {
      BIGBATCH_THROW(InvalidArgument,
                     "ddp.partition = optimizer cannot be combined with optim.kfac = true (K-FAC "
                     "needs every layer's whole gradient on one rank); set one of them off");
    }
    if (!c.getBool("optim.fused")) {
      BIGBATCH_THROW(InvalidArgument,
                     "ddp.partition = optimizer needs the fused optimizer (optim.fused = true): "
                     "its per-layer norms are summed from every rank's slices in one pass");
    }
  }
  if (c.getFloat("schedule.warmup_epochs") > static_cast<double>(c.getInt("train.epochs"))) {
    BIGBATCH_THROW(InvalidArgument, "schedule.warmup_epochs = {} exceeds train.epochs = {}",
                   c.getFloat("schedule.warmup_epochs"), c.getInt("train.epochs"));
  }
}

void validateTrainingData(const Config& config) {
  train_detail::checkTrainingDataOpens(train_detail::dataOptionsFor(config));
}

std::string describeConfigSchema(const std::vector<ConfigField>& schema, bool markdown) {
  std::string out;
  if (markdown) out += "| key | type | default | allowed | meaning |\n|---|---|---|---|---|\n";
  for (const auto& f : schema) {
    std::string allowed;
    if (!f.choices.empty() && f.type == ConfigType::kString) {
      allowed = fmt::format("{}", fmt::join(f.choices, ", "));
    } else if (f.min || f.max) {
      allowed = fmt::format(
          "{}{} .. {}", f.choices.empty() ? "" : fmt::format("{}, ", fmt::join(f.choices, ", ")),
          formatConfigBound(f, f.min, "-inf"), formatConfigBound(f, f.max, "inf"));
    }
    const std::string type = f.type == ConfigType::kInt       ? "int"
                             : f.type == ConfigType::kFloat   ? "float"
                             : f.type == ConfigType::kBool    ? "bool"
                             : f.type == ConfigType::kString  ? "string"
                             : f.type == ConfigType::kIntList ? "int list"
                                                              : "float list";
    if (markdown) {
      out += fmt::format("| `{}` | {} | `{}` | {} | {} |\n", f.key, type,
                         formatConfigValue(f.defaultValue), allowed, f.help);
    } else {
      out += fmt::format("{:<30} {:<7} {:<18} {:<28} {}\n", f.key, type,
                         formatConfigValue(f.defaultValue), allowed, f.help);
    }
  }
  return out;
}

}  // namespace bigbatch

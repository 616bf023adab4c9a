#include "recipe/recipe_keys.h"

#include <limits>
#include <optional>
#include <type_traits>

namespace bigbatch::train_detail {
namespace {

using T = ConfigType;
using L = std::vector<int64_t>;
using Bind = RecipeKey::Bind;
constexpr double kInf = std::numeric_limits<double>::infinity();

ConfigField F(std::string key, T type, ConfigValue def, std::string help,
              std::optional<double> min = std::nullopt, std::optional<double> max = std::nullopt,
              std::vector<std::string> choices = {}) {
  return ConfigField{std::move(key),    type, std::move(def), std::move(help), min, max,
                     std::move(choices)};
}

// The config's value of `key` as a V (the member it goes to): integers of
// any width from int keys, doubles from float keys, and so on.
template <class V>
V read(const Config& c, const std::string& key) {
  if constexpr (std::is_same_v<V, bool>) {
    return c.getBool(key);
  } else if constexpr (std::is_integral_v<V>) {
    return static_cast<V>(c.getInt(key));
  } else if constexpr (std::is_floating_point_v<V>) {
    return static_cast<V>(c.getFloat(key));
  } else if constexpr (std::is_same_v<V, std::string>) {
    return c.getString(key);
  } else if constexpr (std::is_same_v<V, std::vector<int64_t>>) {
    return c.getIntList(key);
  } else {
    static_assert(std::is_same_v<V, std::vector<double>>, "no config type for this member");
    return c.getFloatList(key);
  }
}

// The key's value into a member of the recipe, or of one of its parts.
template <class V>
Bind to(V RunRecipe::*member) {
  return [member](const Config& c, const std::string& key, RunRecipe& r) {
    r.*member = read<V>(c, key);
  };
}
template <class S, class V>
Bind to(S RunRecipe::*part, V S::*member) {
  return [part, member](const Config& c, const std::string& key, RunRecipe& r) {
    r.*part.*member = read<V>(c, key);
  };
}
ReadBy readWhereUsed(std::string where) { return ReadBy{std::move(where)}; }

// The key's value, read as a V, handed to `put` (a choice that becomes a
// flag or an enum, a value that goes to two places).
template <class V, class Put>
Bind with(Put put) {
  return [put](const Config& c, const std::string& key, RunRecipe& r) { put(r, read<V>(c, key)); };
}

}  // namespace

namespace {

// run.*: where the run lives, its seed, threads and workers.
std::vector<RecipeKey> runKeys() {
  return {
      {F("run.name", T::kString, std::string(""), "run name; empty: the config file's stem"),
       readWhereUsed("run_start.cpp: the run directory, before any recipe")},
      {F("run.dir", T::kString, std::string(""),
        "run directory; empty: <run.out_dir>/<run.name>-<UTC timestamp>"),
       readWhereUsed("run_start.cpp and resume.cpp: the run directory")},
      {F("run.out_dir", T::kString, std::string("runs"),
        "parent of automatically named run directories"),
       readWhereUsed("run_start.cpp and resume.cpp: the run directory")},
      {F("run.seed", T::kInt, int64_t{1}, "seed of initialisation, data order and augmentation", 0.0,
        4294967295.0),
       with<int64_t>([](RunRecipe& r, int64_t v) {
          r.seed = static_cast<uint64_t>(v);
          r.data.seed = r.seed;
        })},
      {F("run.threads", T::kInt, int64_t{0},
        "compute threads per rank; 0: the CPUs this rank may run on / the ranks of its host "
        "that share them",
        0.0, 1024.0),
       to(&RunRecipe::threads)},
      {F("run.device", T::kString, std::string("cpu"),
        "where each rank computes: cpu, or cuda (rank r uses GPU r mod the GPUs of its host; "
        "needs the CUDA build, docs/GPU.md)",
        {}, {}, {"cpu", "cuda"}),
       readWhereUsed("run_start.cpp: the device, before the recipe")},
      {F("run.deterministic", T::kBool, false,
        "run.device = cuda: the same run twice gives the same weights - cuDNN's deterministic "
        "algorithms, no per-shape benchmarking, cuBLAS with a fixed workspace "
        "(CUBLAS_WORKSPACE_CONFIG=:4096:8 unless set) and ATen's deterministic kernels (an op "
        "without one is an error naming it: a TorchScript model's, say); slower. The CPU is "
        "deterministic at a fixed run.threads already"),
       readWhereUsed("run_start.cpp: set with the device")},
      {F("run.cuda_graph", T::kBool, false,
        "run.device = cuda: capture the training step - forward, backward, loss scaling and the "
        "optimizer step - as one CUDA graph after 3 eager warm-up steps and replay it for every "
        "full batch (the learning rate, momentum and loss scale are read from device memory, so "
        "the schedules run on). Refused, naming why, where a step cannot be captured: the CPU, "
        "more than one rank, train.accumulation_steps > 1, train.virtual_workers > 1, "
        "optim.kfac, optim.fused = false, ddp.compression, model.name = torchscript, "
        "train.nonfinite = skip, a batch-size schedule (docs/GPU.md, \"The single-GPU step\")"),
       to(&RunRecipe::cudaGraph)},
      {F("run.workers", T::kInt, int64_t{1},
        "ranks to start (bigbatch runs run.launcher itself); ignored under mpirun or srun, "
        "which give the world size",
        1.0, 4096.0),
       readWhereUsed("the launcher (apps/), before any rank")},
      {F("run.launcher", T::kString, std::string("mpirun"),
        "what starts run.workers ranks: mpirun (Open MPI's, or the words of BIGBATCH_MPIRUN, "
        "e.g. with --hostfile) or srun (Slurm's, inside an allocation: PMIx, "
        "--kill-on-bad-exit); --launcher overrides it (docs/RELIABILITY.md, \"Launchers\")",
        {}, {}, {"mpirun", "srun"}),
       readWhereUsed("the launcher (apps/), before any rank")},
      {F("run.max_restarts", T::kInt, int64_t{0},
        "restarts after a failure: the launcher stays as a supervisor, ends every process of "
        "the failed attempt and resumes the job from its newest checkpoint in the same run "
        "directory (bit-exact on the CPU on the same world size); 0: a failure ends the job; "
        "--max-restarts overrides it (docs/RELIABILITY.md, \"Restarts\")",
        0.0, 1000.0),
       readWhereUsed("the launcher (apps/), before any rank")},
      {F("run.min_workers", T::kInt, int64_t{0},
        "under run.max_restarts: a worker that fails again right after its restart is taken "
        "as lost and the job goes on with one fewer, down to this many, global batch kept "
        "(train.batch_size stays, accumulation absorbs it; every world from this to "
        "run.workers must divide the global batch); 0: never fewer; --min-workers overrides "
        "it (docs/RELIABILITY.md, \"Fewer workers\")",
        0.0, 4096.0),
       readWhereUsed("the launcher (apps/), before any rank")},
  };
}

// data.*: the data set, its augmentation and the input pipeline.
std::vector<RecipeKey> dataKeys() {
  return {
      {F("data.dataset", T::kString, std::string("fashion-mnist"),
        "training data: fashion-mnist (IDX files), cifar10 (the binary version), folder "
        "(ImageNet-style class folders of JPEGs) or synthetic",
        {}, {}, {"fashion-mnist", "cifar10", "folder", "synthetic"}),
       to(&RunRecipe::data, &DataOptions::dataset)},
      {F("data.path", T::kString, std::string(""),
        "fashion-mnist: the IDX directory (empty: /usr/share/datasets/fashion-mnist); cifar10: "
        "the folder of data_batch_1..5.bin and test_batch.bin; folder: a root with train/ and "
        "val/; relative in a recipe: from the recipe's folder"),
       to(&RunRecipe::data, &DataOptions::path)},
      {F("data.train_dir", T::kString, std::string(""),
        "folder: the training split, one sub-folder of JPEGs per class (empty: data.path/train)"),
       to(&RunRecipe::data, &DataOptions::trainDir)},
      {F("data.val_dir", T::kString, std::string(""),
        "folder: the validation split, the same class sub-folders (empty: data.path/val)"),
       to(&RunRecipe::data, &DataOptions::valDir)},
      {F("data.train_samples", T::kInt, int64_t{0},
        "use only N training samples: the first N (fashion-mnist, synthetic), or N spread "
        "evenly over the set (cifar10, folder: a class-sorted folder keeps every class); 0: all",
        0.0, kInf),
       to(&RunRecipe::data, &DataOptions::trainSamples)},
      {F("data.eval_samples", T::kInt, int64_t{0},
        "use only N test samples, chosen as data.train_samples; 0: all", 0.0, kInf),
       to(&RunRecipe::data, &DataOptions::evalSamples)},
      {F("data.synthetic_shape", T::kIntList, std::vector<int64_t>{1, 28, 28},
        "synthetic: [channels, height, width] of its images (e.g. [3, 224, 224] for "
        "ImageNet-sized throughput benchmarks)"),
       to(&RunRecipe::data, &DataOptions::syntheticShape)},
      {F("data.synthetic_classes", T::kInt, int64_t{10}, "synthetic: number of classes", 2.0,
        100000.0),
       to(&RunRecipe::data, &DataOptions::syntheticClasses)},
      {F("data.flip", T::kBool, true, "random horizontal flip"),
       to(&RunRecipe::data, &DataOptions::flip)},
      {F("data.pad_crop", T::kInt, int64_t{0}, "pad by N pixels and crop back at a random offset",
        0.0, 8.0),
       to(&RunRecipe::data, &DataOptions::padCrop)},
      {F("data.random_resized_crop", T::kBool, true,
        "folder: train on random-resized crops (Szegedy et al. 2015) of data.crop_scale and "
        "data.crop_ratio, resized to model.image_size; false: the whole image resized"),
       to(&RunRecipe::data, &DataOptions::randomResizedCrop)},
      {F("data.crop_scale", T::kFloatList, std::vector<double>{0.08, 1.0},
        "folder: [min, max] area of a random-resized crop, fraction of the image", 0.0, 1.0),
       to(&RunRecipe::data, &DataOptions::cropScale)},
      {F("data.crop_ratio", T::kFloatList, std::vector<double>{3.0 / 4.0, 4.0 / 3.0},
        "folder: [min, max] aspect ratio (width / height) of a random-resized crop", 0.0, 100.0),
       to(&RunRecipe::data, &DataOptions::cropRatio)},
      {F("data.eval_crop", T::kFloat, 0.875,
        "folder: validation takes the centred crop of this fraction of the shorter side, "
        "resized to model.image_size (0.875: resize 256, crop 224); 1: the whole image",
        0.01, 1.0),
       to(&RunRecipe::data, &DataOptions::evalCrop)},
      {F("data.decode", T::kString, std::string("cpu"),
        "folder: where the JPEGs are decoded — cpu (libjpeg-turbo on the pipeline's threads) or "
        "gpu (nvJPEG on the training GPU, the GPU's JPEG engines where it has them; the crop, "
        "flip and normalisation on the GPU too; the files read by data.read_threads host "
        "threads, 2 when 0): the same samples, order, labels, crops and flips either way; gpu "
        "needs the CUDA build with nvJPEG and run.device = cuda (docs/INPUT_PIPELINE.md, "
        "\"Decoding on the GPU\")",
        {}, {}, {"cpu", "gpu"}),
       to(&RunRecipe::data, &DataOptions::decode)},
      {F("data.transfer", T::kString, std::string("auto"),
        "what a training batch carries to the model's device: uint8 (8-bit pixels, cropped and "
        "resized on the host; the flip and normalisation on the device, into the compute "
        "dtype: a quarter of float's bytes on the bus), float (normalised on the host, as the "
        "CPU computes); auto: uint8 on run.device = cuda, float on the CPU. data.decode = gpu "
        "decodes on the device and ignores it",
        {}, {}, {"auto", "uint8", "float"}),
       to(&RunRecipe::transfer)},
      {F("data.cache_mb", T::kInt, int64_t{0},
        "keep up to N MiB of decoded training images across epochs (later epochs skip reading "
        "and decoding them); 0: none",
        0.0, 1048576.0),
       to(&RunRecipe::cacheMb)},

      {F("data.read_threads", T::kInt, int64_t{0},
        "input pipeline: threads that read samples; 0 (with decode_threads and augment_threads "
        "0): inline, each micro-batch assembled on the training thread when it is needed",
        0.0, 256.0),
       to(&RunRecipe::pipeline, &PipelineOptions::readThreads)},
      {F("data.decode_threads", T::kInt, int64_t{0}, "input pipeline: threads that decode samples",
        0.0, 256.0),
       to(&RunRecipe::pipeline, &PipelineOptions::decodeThreads)},
      {F("data.augment_threads", T::kInt, int64_t{0},
        "input pipeline: threads that augment samples into batches", 0.0, 256.0),
       to(&RunRecipe::pipeline, &PipelineOptions::augmentThreads)},
      {F("data.prefetch_batches", T::kInt, int64_t{4},
        "input pipeline: micro-batches prepared ahead of training", 1.0, 1024.0),
       to(&RunRecipe::pipeline, &PipelineOptions::prefetchBatches)},
      {F("data.bad_samples", T::kString, std::string("skip"),
        "an unreadable or corrupt sample: skip (log its path, count it, leave it out) or fail", {},
        {}, {"skip", "fail"}),
       with<std::string>([](RunRecipe& r, const std::string& v) { r.pipeline.skipBadSamples = v == "skip"; })},
  };
}

// model.*: the architecture and its BatchNorm.
std::vector<RecipeKey> modelKeys() {
  return {
      {F("model.name", T::kString, std::string("cnn"),
        "architecture: the zoo's, or torchscript: a module saved from Python (model.path)", {},
        {}, {"cnn", "resnet", "resnet50", "torchscript"}),
       with<std::string>([](RunRecipe& r, const std::string& v) { r.model.name = r.modelName = v; })},
      {F("model.path", T::kString, std::string(""),
        "torchscript: the module file, torch.jit.script(model).save(FILE) — its forward(images) "
        "returns logits [N, classes]; every rank loads it (the same weights, no broadcast); the "
        "other model.* architecture keys do not apply; relative in a recipe: from the recipe's "
        "folder (docs/TORCHSCRIPT.md)"),
       to(&RunRecipe::model, &ModelOptions::path)},
      {F("model.widths", T::kIntList, L{16, 32, 64}, "channels of each stage", 1.0, 4096.0),
       to(&RunRecipe::model, &ModelOptions::widths)},
      {F("model.blocks", T::kIntList, L{2, 2, 1},
        "conv layers (cnn) or residual blocks (resnet) per stage", 1.0, 64.0),
       to(&RunRecipe::model, &ModelOptions::blocks)},
      {F("model.bn_momentum", T::kFloat, 0.1,
        "BatchNorm running-statistics momentum (PyTorch convention)", 0.0, 1.0),
       to(&RunRecipe::model, &ModelOptions::bnMomentum)},
      {F("model.bn_eps", T::kFloat, 1e-5, "BatchNorm epsilon", 1e-12, 1.0),
       to(&RunRecipe::model, &ModelOptions::bnEps)},
      {F("model.zero_init_residual", T::kBool, true, "zero γ of each residual block's last BN"),
       to(&RunRecipe::model, &ModelOptions::zeroInitResidual)},
      {F("model.hidden", T::kInt, int64_t{0},
        "cnn: width of a hidden fully-connected layer before fc (0: none); 350000 gives "
        "ResNet-50's 25.6 M gradient values for little compute (the exchange-bound benchmark)",
        0.0, 1e8),
       to(&RunRecipe::model, &ModelOptions::hidden)},
      {F("model.head_pool", T::kInt, int64_t{1},
        "cnn: the classifier reads the last stage's features average-pooled to N x N "
        "(N*N*width inputs: where features are, not only which); 1: global average pooling",
        1.0, 64.0),
       to(&RunRecipe::model, &ModelOptions::headPool)},
      {F("model.image_size", T::kInt, int64_t{0},
        "side of the images the model sees; 0: the data's own (28 Fashion-MNIST, 32 CIFAR-10), "
        "224 for folders (which are resized to it)",
        0.0, 4096.0),
       to(&RunRecipe::data, &DataOptions::imageSize)},
      {F("model.fused_bn", T::kString, std::string("auto"),
        "resnet50 on run.device = cuda: each bottleneck's BatchNorm+ReLU and "
        "BatchNorm+add+ReLU as one cuDNN kernel each (cudnnBatchNormalizationForwardTrainingEx "
        "with BN_ACTIVATION / BN_ADD_ACTIVATION, NHWC fp16), forward and backward; auto: on "
        "for amp.precision = fp16 with model.channels_last; on: the same, refused where it "
        "cannot fuse (off the CUDA build or device, another precision, NCHW); off: the unfused "
        "layers. A shape cuDNN does not fuse (asked once per shape, at that shape) runs unfused",
        {}, {}, {"auto", "on", "off"}),
       to(&RunRecipe::fusedBn)},
      {F("model.channels_last", T::kBool, true,
        "NHWC memory format (faster oneDNN convolutions on CPU)"),
       to(&RunRecipe::channelsLast)},
  };
}

// train.*: batch, epochs, target, evaluation, loss.
std::vector<RecipeKey> trainKeys() {
  return {
      {F("train.batch_size", T::kInt, int64_t{128},
        "images per rank per micro-batch; global batch = ranks x batch_size x accumulation_steps",
        1.0, 1048576.0),
       to(&RunRecipe::batchPerRank)},
      {F("train.accumulation_steps", T::kInt, int64_t{1},
        "micro-batches whose gradients are summed before each update", 1.0, 4096.0),
       to(&RunRecipe::accumulation)},
      {F("train.virtual_workers", T::kInt, int64_t{1},
        "BatchNorm groups per micro-batch (ghost batch norm): each group of batch_size / V "
        "images gets its own batch statistics, as on ranks x V real workers",
        1.0, 65536.0),
       to(&RunRecipe::step, &StepSettings::groups)},
      {F("train.average_bn_stats", T::kBool, true,
        "BatchNorm running statistics for evaluation and model.pt: their mean over the ranks "
        "(true), or rank 0's (false); either way the accuracy reported is that of model.pt"),
       to(&RunRecipe::averageBnStats)},
      {F("train.epochs", T::kInt, int64_t{10}, "epoch budget", 1.0, 100000.0),
       to(&RunRecipe::epochs)},
      {F("train.target_accuracy", T::kFloat, 0.92,
        "test accuracy (fraction, of train.target_metric) that ends the run", 0.0, 1.0),
       to(&RunRecipe::targetAccuracy)},
      {F("train.target_metric", T::kString, std::string("top1"),
        "the accuracy train.target_accuracy applies to: top1, or top5 (MoXing's DAWNBench "
        "target was 93 % top-5)",
        {}, {}, {"top1", "top5"}),
       with<std::string>([](RunRecipe& r, const std::string& v) { r.targetTop5 = v == "top5"; })},
      {F("train.stop_at_target", T::kBool, true, "stop as soon as the target is reached"),
       to(&RunRecipe::stopAtTarget)},
      {F("train.stop_after_epoch", T::kInt, int64_t{0},
        "end this invocation after epoch N, evaluated and checkpointed, as if interrupted there "
        "(summary.json: paused); the schedules still span train.epochs and `--resume auto` "
        "continues the run. `bigbatch tune` stops trials at its rungs this way. 0: never",
        0.0, 100000.0),
       to(&RunRecipe::stopAfterEpoch)},
      {F("train.eval_every", T::kInt, int64_t{1}, "evaluate every N epochs (and after the last)",
        1.0, 100000.0),
       to(&RunRecipe::evalEvery)},
      {F("train.eval_flip", T::kBool, false,
        "test-time augmentation: classify each test image by the mean softmax of it and its "
        "mirror image (one more forward pass per image; reported accuracies include it)"),
       to(&RunRecipe::evalFlip)},
      {F("train.eval_batch_size", T::kInt, int64_t{1000}, "images per evaluation forward pass", 1.0,
        1048576.0),
       to(&RunRecipe::evalBatch)},
      {F("train.label_smoothing", T::kFloat, 0.0, "label smoothing α: target (1-α)·onehot + α/K",
        0.0, 0.999),
       to(&RunRecipe::step, &StepSettings::labelSmoothing)},

      {F("train.nonfinite", T::kString, std::string("stop"),
        "a non-finite loss or gradient: stop (fail naming the step and tensor) or skip the step "
        "(weights untouched, counted in metrics.csv)",
        {}, {}, {"stop", "skip"}),
       with<std::string>([](RunRecipe& r, const std::string& v) { r.step.skipNonFinite = v == "skip"; })},
  };
}

// ckpt.*: checkpoints.
std::vector<RecipeKey> ckptKeys() {
  return {
      {F("ckpt.every_epochs", T::kInt, int64_t{1},
        "write a checkpoint every N epochs (and at the end); 0: only at the end", 0.0, 100000.0),
       to(&RunRecipe::ckpt, &CheckpointPlan::everyEpochs)},
      {F("ckpt.every_steps", T::kInt, int64_t{0},
        "also write one every N optimizer steps (mid-epoch); 0: off", 0.0, 1e12),
       to(&RunRecipe::ckpt, &CheckpointPlan::everySteps)},
      {F("ckpt.keep", T::kInt, int64_t{2}, "checkpoints kept (the newest)", 1.0, 100000.0),
       to(&RunRecipe::ckpt, &CheckpointPlan::keep)},
      {F("ckpt.background", T::kBool, true,
        "write checkpoints behind training: the step waits only for a copy of the state in "
        "memory, the write (still atomic) runs on a thread of its own; false: the step waits "
        "for the file (docs/RELIABILITY.md, \"Checkpoint cost\")"),
       to(&RunRecipe::ckpt, &CheckpointPlan::background)},
      {F("ckpt.dir", T::kString, std::string(""),
        "checkpoint directory; empty: <run directory>/checkpoints. Each checkpoint names the "
        "run directory that wrote it: a run never removes (--overwrite) or resumes (--resume "
        "auto) another run's, and a new run refuses a ckpt.dir that holds another run's"),
       to(&RunRecipe::ckpt, &CheckpointPlan::dir)},
  };
}

// fault.*: fault injection (tests and docs/RELIABILITY.md).
std::vector<RecipeKey> faultKeys() {
  return {
      {F("fault.kind", T::kString, std::string("none"),
        "fault injection for tests: at optimizer step fault.step, rank fault.rank throws, "
        "aborts, SIGKILLs itself, hangs, gets a NaN loss (nan) or a NaN batch (nan_input), or "
        "pauses until its marker in fault.pause_dir is removed (pause)",
        {}, {}, {"none", "throw", "abort", "sigkill", "hang", "nan", "nan_input", "pause"}),
       to(&RunRecipe::fault, &FaultPlan::kind)},
      {F("fault.rank", T::kInt, int64_t{0},
        "rank that injects the fault, -1: every rank (unless fault.host or fault.slot is set)",
        -1.0, 1e6),
       to(&RunRecipe::fault, &FaultPlan::rank)},
      {F("fault.host", T::kString, std::string(""),
        "inject on every rank of the host of this name (a lost host, whichever ranks it gets); "
        "\"\": any host"),
       to(&RunRecipe::fault, &FaultPlan::host)},
      {F("fault.slot", T::kInt, int64_t{-1},
        "inject on the rank in this slot of its host (a bad GPU: device = slot mod GPUs), "
        "whichever rank it is; -1: any slot",
        -1.0, 1e6),
       to(&RunRecipe::fault, &FaultPlan::slot)},
      {F("fault.step", T::kInt, int64_t{1}, "1-based optimizer step at which the fault fires", 1.0,
        1e12),
       to(&RunRecipe::fault, &FaultPlan::step)},
      {F("fault.during", T::kString, std::string("step"),
        "where the fault fires: as step fault.step begins (step), with its gradients in flight "
        "(exchange), in the first evaluation (evaluation) or checkpoint write (checkpoint) at or "
        "after it; NaN faults only at a step",
        {}, {}, {"step", "exchange", "evaluation", "checkpoint"}),
       to(&RunRecipe::fault, &FaultPlan::during)},
      {F("fault.attempts", T::kInt, int64_t{0},
        "under --max-restarts (or torchrun's --max_restarts), fire only in the first N attempts "
        "(a transient fault the restart recovers from); 0: every attempt",
        0.0, 1000.0),
       to(&RunRecipe::fault, &FaultPlan::attempts)},
      {F("fault.pause_dir", T::kString, std::string(""),
        "fault.kind = pause: the directory where a paused rank writes paused-rank-<rank> and "
        "waits until the file is removed (a state a test acts on)"),
       to(&RunRecipe::fault, &FaultPlan::pauseDir)},
  };
}

// ddp.*: the gradient exchange.
std::vector<RecipeKey> ddpKeys() {
  return {
      {F("ddp.fusion_bytes", T::kInt, int64_t{1} << 20,
        "gradient bytes per exchange bucket (buckets are sent as soon as backward fills them); "
        "\"auto\" (or 0): time 16 KiB, 64 KiB, ... x4 up to one bucket over the first steps (5 "
        "each) and keep the fastest by the slowest rank; 1 MiB with ddp.partition = optimizer",
        0.0, 1073741824.0, {"auto"}),
       to(&RunRecipe::ddp, &DdpOptions::fusionBytes)},
      {F("ddp.exchange_dtype", T::kString, std::string("fp32"),
        "gradient type on the wire: fp16/bf16 halve the bytes (pre-divided by the world size, "
        "added in 16 bits by the collective, written back to fp32 gradients)",
        {}, {}, {"fp32", "fp16", "bf16"}),
       with<std::string>([](RunRecipe& r, const std::string& v) {
          r.exchangeDtype = v;
          r.ddp.exchangeType = v == "fp16"   ? DataType::kFloat16
                               : v == "bf16" ? DataType::kBFloat16
                                             : DataType::kFloat32;
        })},
      {F("ddp.overlap", T::kBool, true,
        "exchange each bucket during backward; false: all buckets after backward"),
       to(&RunRecipe::ddp, &DdpOptions::overlap)},
      {F("ddp.partition", T::kString, std::string("none"),
        "optimizer: partitioned optimizer state (ZeRO-1) - gradients reduce-scattered, each rank "
        "updates and keeps state for 1/N of every bucket, weights all-gathered (run.device = "
        "cuda: through host memory, the slices and their optimizer on the host); none: "
        "allreduce",
        {}, {}, {"none", "optimizer"}),
       with<std::string>([](RunRecipe& r, const std::string& v) { r.ddp.partition = v == "optimizer"; })},
      {F("ddp.compression", T::kString, std::string("none"),
        "gradient compression: powersgd sends each large gradient matrix as two rank-r factors "
        "(Vogels et al. 2019; error feedback and warm-started Q), vectors and small matrices "
        "uncompressed, all in ddp.exchange_dtype (fp16/bf16: half the bytes again); on the host "
        "exchange or, on GPUs, NCCL's stream; not with ddp.partition = optimizer or optim.kfac; "
        "none: every value sent",
        {}, {}, {"none", "powersgd"}),
       with<std::string>([](RunRecipe& r, const std::string& v) {
          r.ddp.compression =
              v == "powersgd" ? GradientCompression::kPowerSgd : GradientCompression::kNone;
          r.compressionName = v;
        })},
      {F("ddp.powersgd_rank", T::kInt, int64_t{4},
        "rank r of PowerSGD's factors: a matrix is compressed when (n + m) r is at most half of "
        "n m; refused when it compresses no layer",
        1.0, 1024.0),
       with<int64_t>([](RunRecipe& r, int64_t v) { r.ddp.powerSgd.rank = static_cast<int>(v); })},
      {F("ddp.powersgd_start_step", T::kInt, int64_t{0},
        "synced steps exchanged uncompressed before PowerSGD starts (e.g. the warmup's steps)",
        0.0, 1e12),
       with<int64_t>([](RunRecipe& r, int64_t v) { r.ddp.powerSgd.startStep = v; })},
      {F("ddp.powersgd_error_feedback", T::kBool, true,
        "add what compression left out of a rank's gradient to its next one (off: ablation)"),
       with<bool>([](RunRecipe& r, bool v) { r.ddp.powerSgd.errorFeedback = v; })},
      {F("ddp.powersgd_warm_start", T::kBool, true,
        "start each step's power iteration from the last step's Q (off: a fresh random Q)"),
       with<bool>([](RunRecipe& r, bool v) { r.ddp.powerSgd.warmStart = v; })},
      {F("ddp.gpu_exchange", T::kString, std::string("auto"),
        "run.device = cuda on 2+ ranks: nccl (buckets summed by NCCL on the GPUs; every rank "
        "needs a GPU of its own), host (through pinned host memory and the host collectives), "
        "auto: nccl where the build has NCCL, no two ranks share a GPU and ddp.partition = "
        "none, else host",
        {}, {}, {"auto", "nccl", "host"}),
       to(&RunRecipe::gpuExchange)},
  };
}

// amp.*: mixed precision and loss scaling.
std::vector<RecipeKey> ampKeys() {
  return {
      {F("amp.precision", T::kString, std::string("fp32"),
        "compute type: bf16/fp16 run convolutions and matmuls in 16 bits (autocast) on copies of "
        "the fp32 master weights; fp16 needs run.device = cuda and is refused on CPU (libtorch "
        "1.13's CPU autocast is bf16 only)",
        {}, {}, {"fp32", "bf16", "fp16"}),
       with<std::string>([](RunRecipe& r, const std::string& v) {
          r.precisionName = v;
          r.precision = parsePrecision(v);
        })},
      {F("amp.tf32", T::kBool, true,
        "run.device = cuda: fp32 matmuls and convolutions on TF32 tensor cores (PyTorch's "
        "default for convolutions); false: full fp32"),
       readWhereUsed("run_start.cpp: set with the device")},
      {F("amp.loss_scaling", T::kString, std::string("auto"),
        "dynamic loss scaling: auto (on with fp16 compute or ddp.exchange_dtype = fp16), on, off",
        {}, {}, {"auto", "on", "off"}),
       to(&RunRecipe::lossScaling)},
      {F("amp.init_scale", T::kFloat, 65536.0, "initial loss scale", 1e-30, 3e38),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::initScale)},
      {F("amp.growth_interval", T::kInt, int64_t{2000},
        "clean steps in a row after which the loss scale doubles", 1.0, 1e12),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::growthInterval)},
      {F("amp.growth_factor", T::kFloat, 2.0, "loss-scale growth factor", 1.0, 1e6),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::growthFactor)},
      {F("amp.backoff_factor", T::kFloat, 0.5,
        "loss-scale factor after an overflowing step (the step is skipped)", 1e-6, 1.0),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::backoffFactor)},
      {F("amp.min_scale", T::kFloat, 1.0,
        "loss-scale floor; an overflow at the floor is a divergence (train.nonfinite decides)",
        1e-30, 3e38),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::minScale)},
      {F("amp.max_scale", T::kFloat, 16777216.0, "loss-scale ceiling (2^24)", 1e-30, 3e38),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::maxScale)},
      {F("amp.hysteresis", T::kInt, int64_t{1},
        "overflowing steps (since the last change) before the scale backs off", 1.0, 1e6),
       to(&RunRecipe::scalerSettings, &LossScalerOptions::hysteresis)},
  };
}

// comm.*: the collectives and their deadline.
std::vector<RecipeKey> commKeys() {
  return {
      {F("comm.allreduce", T::kString, std::string("auto"),
        "allreduce algorithm; auto: by message size and topology", {}, {},
        {"auto", "shm", "hierarchical", "ring", "halving_doubling", "recursive_doubling", "mpi"}),
       to(&RunRecipe::ddp, &DdpOptions::allreduce)},
      {F("comm.allreduce_table", T::kString, std::string(""),
        "rules for auto, e.g. \"64K:recursive_doubling,shm\"; empty: the built-in table"),
       to(&RunRecipe::ddp, &DdpOptions::allreduceTable)},
      {F("comm.allreduce_tune", T::kBool, true,
        "auto: time the table's choice, ring and MPI_Allreduce on the first calls of each size "
        "and keep the fastest; false: the table alone (the same algorithm, and so the same fp32 "
        "summation order past 2 ranks, in every run)"),
       to(&RunRecipe::ddp, &DdpOptions::tune)},
      {F("comm.timeout_s", T::kFloat, 60.0,
        "seconds a rank waits for a peer before failing with an error naming it", 0.1, 86400.0),
       to(&RunRecipe::timeoutS)},
  };
}

// optim.*: the optimizer and K-FAC.
std::vector<RecipeKey> optimKeys() {
  return {
      {F("optim.name", T::kString, std::string("sgd"),
        "optimizer: sgd (momentum, Nesterov), lars (You et al. 2017), lamb (You et al. 2019)", {},
        {}, {"sgd", "lars", "lamb"}),
       to(&RunRecipe::optimizer, &OptimizerOptions::name)},
      {F("optim.lr", T::kFloat, 0.1, "peak learning rate at the global batch", 0.0, 1e6),
       to(&RunRecipe::configuredLr)},
      {F("optim.lr_per_256", T::kFloat, 0.0,
        "when > 0, the peak lr is lr_per_256 x global batch / 256 (linear scaling rule) and "
        "optim.lr is ignored",
        0.0, 1e6),
       to(&RunRecipe::lrPer256)},
      {F("optim.momentum", T::kFloat, 0.9, "momentum (sgd, lars)", 0.0, 0.999999),
       with<double>([](RunRecipe& r, double v) { r.momentum = r.optimizer.momentum = v; })},
      {F("optim.nesterov", T::kBool, true, "Nesterov momentum (sgd)"),
       to(&RunRecipe::optimizer, &OptimizerOptions::nesterov)},
      {F("optim.weight_decay", T::kFloat, 5e-4,
        "weight decay of regular parameters (L2 for sgd "
        "and lars, decoupled lambda for lamb)",
        0.0, 1.0),
       to(&RunRecipe::optimizer, &OptimizerOptions::weightDecay)},
      {F("optim.exclude_bn_bias", T::kBool, true,
        "BatchNorm parameters and biases form the excluded group: no trust ratio, "
        "optim.excluded_weight_decay and optim.excluded_lr_scale"),
       to(&RunRecipe::optimizer, &OptimizerOptions::exclude)},
      {F("optim.exclude_pattern", T::kString, std::string(""),
        "regex searched in parameter names (e.g. \"bn|bias\") that selects the excluded group; "
        "empty: every tensor of rank <= 1"),
       to(&RunRecipe::optimizer, &OptimizerOptions::excludePattern)},
      {F("optim.excluded_lr_scale", T::kFloat, 1.0, "lr multiplier of excluded parameters", 0.0,
        1e6),
       to(&RunRecipe::optimizer, &OptimizerOptions::excludedLrScale)},
      {F("optim.excluded_weight_decay", T::kFloat, 0.0, "weight decay of excluded parameters", 0.0,
        1.0),
       to(&RunRecipe::optimizer, &OptimizerOptions::excludedWeightDecay)},
      {F("optim.lars_eta", T::kFloat, 0.001, "LARS trust coefficient eta", 1e-12, 1e6),
       to(&RunRecipe::optimizer, &OptimizerOptions::larsEta)},
      {F("optim.lars_epsilon", T::kFloat, 0.0, "LARS epsilon in the trust denominator", 0.0, 1.0),
       to(&RunRecipe::optimizer, &OptimizerOptions::larsEpsilon)},
      {F("optim.beta1", T::kFloat, 0.9, "LAMB first-moment decay", 0.0, 0.999999),
       to(&RunRecipe::optimizer, &OptimizerOptions::beta1)},
      {F("optim.beta2", T::kFloat, 0.999, "LAMB second-moment decay", 0.0, 0.999999),
       to(&RunRecipe::optimizer, &OptimizerOptions::beta2)},
      {F("optim.epsilon", T::kFloat, 1e-6, "LAMB epsilon", 1e-30, 1.0),
       to(&RunRecipe::optimizer, &OptimizerOptions::epsilon)},
      {F("optim.lamb_phi_min", T::kFloat, 0.0, "LAMB: lower clip of the trust numerator phi(|w|)",
        0.0, 1e6),
       to(&RunRecipe::optimizer, &OptimizerOptions::phiMin)},
      {F("optim.lamb_phi_max", T::kFloat, 0.0, "LAMB: upper clip of phi(|w|); 0: no upper clip", 0.0,
        1e6),
       to(&RunRecipe::optimizer, &OptimizerOptions::phiMax)},
      {F("optim.fused", T::kBool, true,
        "fused multi-tensor norm and update passes (CPU fp32); false: per-tensor ATen calls"),
       to(&RunRecipe::optimizer, &OptimizerOptions::fused)},
      {F("optim.kfac", T::kBool, false,
        "K-FAC directions (Martens & Grosse 2015): the gradients of the regular linear and "
        "convolution weights are preconditioned by the layers' Kronecker-factored curvature, "
        "rescaled to the gradient's norm, before the optimizer (any of them) applies them"),
       to(&RunRecipe::kfacOn)},
      {F("optim.kfac_damping", T::kFloat, 0.03,
        "K-FAC: damping added to each factor, relative to its mean eigenvalue", 1e-12, 1e6),
       to(&RunRecipe::kfacSettings, &KfacOptions::damping)},
      {F("optim.kfac_decay", T::kFloat, 0.95,
        "K-FAC: running average of the factors, F = decay*F + (1 - decay)*F_step", 0.0, 0.999999),
       to(&RunRecipe::kfacSettings, &KfacOptions::decay)},
      {F("optim.kfac_inverse_interval", T::kInt, int64_t{1},
        "K-FAC: steps between re-inversions of the damped factors", 1.0, 1e6),
       to(&RunRecipe::kfacSettings, &KfacOptions::inverseInterval)},
      {F("optim.kfac_max_dim", T::kInt, int64_t{1024},
        "K-FAC: cover a layer only when both its factors (in*kh*kw and out) are at most N x N; "
        "larger layers keep their plain gradient. A covered layer costs in*kh*kw squared plus "
        "out squared values of statistics summed over the ranks every step",
        1.0, 65536.0),
       to(&RunRecipe::kfacSettings, &KfacOptions::maxDim)},
      {F("optim.kfac_samples", T::kInt, int64_t{128},
        "K-FAC: images per rank and step whose activations and output gradients feed the "
        "factors (the first of the step's first BatchNorm group)",
        1.0, 1e9),
       to(&RunRecipe::step, &StepSettings::kfacSamples)},
  };
}

// schedule.*: learning-rate, momentum and batch-size schedules.
std::vector<RecipeKey> scheduleKeys() {
  return {
      {F("schedule.warmup_epochs", T::kFloat, 0.5, "linear warmup length in epochs (fractional)",
        0.0, 100000.0),
       to(&RunRecipe::lr, &LrScheduleOptions::warmupEpochs)},
      {F("schedule.warmup_start_factor", T::kFloat, 0.0, "lr at step 0 as a fraction of the peak lr",
        0.0, 1.0),
       to(&RunRecipe::lr, &LrScheduleOptions::warmupStartFactor)},
      {F("schedule.decay", T::kString, std::string("cosine"), "decay after warmup", {}, {},
        {"cosine", "poly", "step", "constant"}),
       to(&RunRecipe::lr, &LrScheduleOptions::decay)},
      {F("schedule.end_lr", T::kFloat, 0.0, "lr at the end of the epoch budget (cosine, poly)", 0.0,
        1e6),
       to(&RunRecipe::lr, &LrScheduleOptions::endLr)},
      {F("schedule.poly_power", T::kFloat, 2.0, "power of the polynomial decay", 0.0, 100.0),
       to(&RunRecipe::lr, &LrScheduleOptions::polyPower)},
      {F("schedule.step_epochs", T::kIntList, L{}, "epochs at which step decay multiplies the lr",
        0.0, 100000.0),
       to(&RunRecipe::lr, &LrScheduleOptions::stepEpochs)},
      {F("schedule.step_gamma", T::kFloat, 0.1, "factor of each step decay", 0.0, 1.0),
       to(&RunRecipe::lr, &LrScheduleOptions::stepGamma)},
      {F("schedule.momentum_epochs", T::kFloatList, std::vector<double>{},
        "momentum schedule: epoch positions of schedule.momentum_values (linear in between, "
        "constant outside); empty: optim.momentum throughout",
        0.0, 100000.0),
       to(&RunRecipe::momentumEpochs)},
      {F("schedule.momentum_values", T::kFloatList, std::vector<double>{},
        "momentum at each of schedule.momentum_epochs", 0.0, 0.999999),
       to(&RunRecipe::momentumValues)},
      {F("schedule.weight_decay_follows_lr", T::kBool, false,
        "scale weight decay by lr / peak lr at every step"),
       to(&RunRecipe::decayFollowsLr)},
      {F("schedule.batch_epochs", T::kIntList, L{},
        "batch-size schedule: from these (1-based) epochs on, the per-rank batch is multiplied by "
        "schedule.batch_factors",
        1.0, 100000.0),
       to(&RunRecipe::batchSchedule, &BatchScheduleOptions::epochs)},
      {F("schedule.batch_factors", T::kIntList, L{},
        "batch multiplier from each of "
        "schedule.batch_epochs on",
        1.0, 65536.0),
       to(&RunRecipe::batchSchedule, &BatchScheduleOptions::factors)},
      {F("schedule.batch_lr_rule", T::kString, std::string("linear"),
        "how the lr follows a batch-size factor k: linear (x k), sqrt (x sqrt(k)), none", {}, {},
        {"linear", "sqrt", "none"}),
       to(&RunRecipe::batchSchedule, &BatchScheduleOptions::lrRule)},
  };
}

// mlperf.*: the MLPerf log's submission keys.
std::vector<RecipeKey> mlperfKeys() {
  return {
      {F("mlperf.submission_benchmark", T::kString, std::string("resnet"),
        "MLPerf benchmark whose key set the log follows"),
       to(&RunRecipe::mlperf, &MlperfSubmission::benchmark)},
      {F("mlperf.submission_org", T::kString, std::string("bigbatch"), "MLPerf submission_org"),
       to(&RunRecipe::mlperf, &MlperfSubmission::org)},
      {F("mlperf.submission_division", T::kString, std::string("open"), "MLPerf submission_division",
        {}, {}, {"open", "closed"}),
       to(&RunRecipe::mlperf, &MlperfSubmission::division)},
      {F("mlperf.submission_status", T::kString, std::string("onprem"), "MLPerf submission_status",
        {}, {}, {"onprem", "cloud", "research", "preview", "available"}),
       to(&RunRecipe::mlperf, &MlperfSubmission::status)},
      {F("mlperf.submission_platform", T::kString, std::string(""),
        "MLPerf submission_platform; empty: <ranks>x<cpu model>"),
       to(&RunRecipe::mlperf, &MlperfSubmission::platform)},
  };
}

}  // namespace

const std::vector<RecipeKey>& recipeKeys() {
  static const std::vector<RecipeKey> all = [] {
    std::vector<RecipeKey> keys;
    for (auto section : {runKeys, dataKeys, modelKeys, trainKeys, ckptKeys, faultKeys, ddpKeys,
                         ampKeys, commKeys, optimKeys, scheduleKeys, mlperfKeys}) {
      for (auto& k : section()) keys.push_back(std::move(k));
    }
    return keys;
  }();
  return all;
}

}  // namespace bigbatch::train_detail

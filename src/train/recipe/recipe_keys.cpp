// The recipe's keys, declared once (recipe_keys.h): the sections of the
// job's shape — run, data, model, train, ckpt, fault — and the table of
// every section; the step's sections are in recipe_keys_step.cpp.
#include "recipe/recipe_keys.h"

#include "recipe/key_binding.h"

namespace bigbatch::train_detail {

using namespace key_binding;

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

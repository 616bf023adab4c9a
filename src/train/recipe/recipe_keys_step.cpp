// The recipe's keys of the step — ddp, amp, comm, optim, schedule,
// mlperf — declared as recipe_keys.cpp declares the job's (recipe_keys.h).
#include "recipe/key_binding.h"

namespace bigbatch::train_detail {

using namespace key_binding;

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

}  // namespace bigbatch::train_detail

// For each parameter set and optimizer: two identical copies of the
// parameters with the same fixed random gradients; each iteration times one
// fused step on the first and one per-tensor (naive) step on the second,
// alternating, so machine noise hits both alike; the median of each is
// reported. The bound is the bytes a two-pass update must touch (per value:
// LARS reads w, g for the norms then reads w, g, v and writes w, v = 28 B;
// LAMB 16 + 28 = 44 B; SGD one pass, 20 B) divided by the measured
// bandwidth of a same-sized memcpy with the same threads (bytes read +
// written per second), so "of bound" is how close a step gets to moving
// its data at memcpy speed. (From its second step on, the fused LARS step
// moves 24 B per value, not 28: it carries |w| from the previous update —
// src/optim/carried_norms.h. The bound keeps the two-pass definition.)
#include "bench_optim.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>
#include <thread>

#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/train/partitioned_state.h"
#include "list_arg.h"

namespace bigbatch {
namespace {

using Clock = std::chrono::steady_clock;

ModelOptions benchModel(const std::string& model) {
  ModelOptions m;
  if (model == "resnet50") {
    m.name = "resnet50";
    m.inChannels = 3;
    m.numClasses = 1000;
  } else if (model == "cnn") {
    m.inChannels = 1;  // the default recipe's model (configs/default.toml)
    m.numClasses = 10;
  } else {
    BIGBATCH_THROW(InvalidArgument, "--models: '{}' is not resnet50 or cnn", model);
  }
  return m;
}

std::vector<torch::Tensor> parameterSet(const std::string& model) {
  std::vector<torch::Tensor> out;
  for (auto& p : buildModel(benchModel(model))->parameters()) out.push_back(p.detach().clone());
  return out;
}

double bytesPerValue(const std::string& optimizer) {
  if (optimizer == "lars") return 28;
  if (optimizer == "lamb") return 44;
  if (optimizer == "sgd") return 20;
  BIGBATCH_THROW(InvalidArgument, "--optimizers: '{}' is not lars, lamb or sgd", optimizer);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Waits for the work queued on `device` (a GPU runs asynchronously).
void finish(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// Bytes read + written per second by a copy of `values` floats on `device`.
double memcpyBandwidth(int64_t values, int iterations, const torch::Device& device) {
  torch::Tensor a = torch::rand({values}).to(device), b = torch::empty({values}, a.options());
  b.copy_(a);
  finish(device);
  std::vector<double> t;
  for (int i = 0; i < std::max(iterations, 5); ++i) {
    const auto t0 = Clock::now();
    b.copy_(a);
    finish(device);
    t.push_back(std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return 2.0 * 4.0 * static_cast<double>(values) / median(t);
}

// The partitioned comparison: on every rank two copies of the model, one
// under an unpartitioned DDP with the optimizer over all of it, one under a
// partitioned DDP with the optimizer over this rank's slices (tied by the
// norm collective). Both get the same fixed random gradients. Each
// iteration: barrier, whole step; barrier, partitioned step; barrier, the
// weight all-gather (what the partitioned step adds to the exchange — an
// allreduce is a reduce-scatter plus an all-gather, so the wire bytes are
// the same). Reported: the slowest rank's median of each.
int runPartitioned(const BenchOptimOptions& o, const std::vector<std::string>& models,
                   const std::vector<std::string>& optimizers, int threads) {
  auto world = MpiCommunicator::world();
  const int n = world->size();
  BIGBATCH_REQUIRE(n >= 2, InvalidArgument,
                   "bench optim --partitioned compares across ranks: run it under mpirun -np N "
                   "with N >= 2 (e.g. mpirun -np 2 bigbatch bench optim --partitioned)");
  const bool lead = world->rank() == 0;
  if (lead && !o.json) {
    fmt::print(
        "# bigbatch bench optim --partitioned: {} ranks x {} thread(s); slowest rank's "
        "median per step\n",
        n, threads);
    fmt::print("{:>9} {:>5} {:>10} {:>10} {:>10} {:>7} {:>10} {:>12} {:>12} {:>6}\n", "model",
               "optim", "values", "whole_ms", "part_ms", "ratio", "gather_ms", "state_whole",
               "state_part", "iters");
  }
  for (const auto& model : models) {
    const ModelOptions m = benchModel(model);
    for (const auto& name : optimizers) {
      std::shared_ptr<ImageClassifierImpl> net[2];
      std::unique_ptr<JobCollectives> job[2];  // outlive ddp[]: their threads
      std::unique_ptr<DistributedDataParallel> ddp[2];
      std::unique_ptr<Optimizer> opt[2];
      OptimizerOptions options;
      options.name = name;
      int64_t values = 0;
      for (int k = 0; k < 2; ++k) {
        torch::manual_seed(1);
        net[k] = buildModel(m);
        DdpOptions d;
        d.partition = k == 1;
        d.fusionBytes = size_t{25} << 20;  // PyTorch DDP's and Horovod's default
        job[k] = std::make_unique<JobCollectives>(*world);
        ddp[k] = std::make_unique<DistributedDataParallel>(*net[k], *job[k], d);
        torch::manual_seed(2);
        values = 0;
        for (auto& p : net[k]->parameters()) {
          torch::NoGradGuard noGrad;
          p.mutable_grad().copy_(1e-3 * torch::randn(p.sizes()));
          values += p.numel();
        }
        opt[k] = makeRunOptimizer(*net[k], *ddp[k], options);
      }
      const int iterations =
          o.iterations > 0 ? o.iterations
                           : static_cast<int>(std::clamp<int64_t>(
                                 int64_t{400000000} / std::max<int64_t>(values, 1), 20, 5000));
      std::vector<double> t[3];
      auto timed = [&](int slot, bool keep, const std::function<void()>& fn) {
        world->barrier();
        const auto t0 = Clock::now();
        fn();
        if (keep) t[slot].push_back(std::chrono::duration<double>(Clock::now() - t0).count());
      };
      for (int it = -3; it < iterations; ++it) {
        timed(0, it >= 0, [&] { opt[0]->step({1e-4}); });
        timed(1, it >= 0, [&] { opt[1]->step({1e-4}); });
        timed(2, it >= 0, [&] {
          ddp[1]->gatherWeights();
          ddp[1]->waitWeights();
        });
      }
      // The slowest rank's medians; rank 0's state bytes (1/N of every
      // bucket, give or take one value per bucket).
      std::vector<double> med = {median(t[0]), median(t[1]), median(t[2])};
      med = job[1]->allreduceMax(med);
      const int64_t wholeBytes = opt[0]->stateBytes(), partBytes = opt[1]->stateBytes();
      if (!lead) continue;
      if (o.json) {
        nlohmann::ordered_json j;
        j["model"] = model;
        j["optimizer"] = name;
        j["ranks"] = n;
        j["threads"] = threads;
        j["values"] = values;
        j["whole_ms"] = med[0] * 1e3;
        j["partitioned_ms"] = med[1] * 1e3;
        j["ratio"] = med[1] / med[0];
        j["gather_ms"] = med[2] * 1e3;
        j["state_bytes_whole"] = wholeBytes;
        j["state_bytes_partitioned"] = partBytes;
        j["iterations"] = iterations;
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print(
            "{:>9} {:>5} {:>10} {:>10.3f} {:>10.3f} {:>7.3f} {:>10.3f} {:>12} {:>12} {:>6}\n",
            model, name, values, med[0] * 1e3, med[1] * 1e3, med[1] / med[0], med[2] * 1e3,
            wholeBytes, partBytes, iterations);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace

int runBenchOptim(const BenchOptimOptions& o) {
  const int threads = o.threads > 0 ? o.threads
                                    : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  torch::set_num_threads(threads);
  const auto models = splitList(o.models);
  const auto optimizers = splitList(o.optimizers);
  BIGBATCH_REQUIRE(!models.empty() && !optimizers.empty(), InvalidArgument,
                   "--models and --optimizers must each name at least one entry");
  for (const auto& name : optimizers) bytesPerValue(name);
  for (const auto& name : models) {
    BIGBATCH_REQUIRE(name == "resnet50" || name == "cnn", InvalidArgument,
                     "--models: '{}' is not resnet50 or cnn", name);
  }
  if (o.partitioned) return runPartitioned(o, models, optimizers, threads);
  BIGBATCH_REQUIRE(o.device == "cpu" || o.device == "cuda", InvalidArgument,
                   "--device '{}' is not cpu or cuda", o.device);
  const torch::Device device = o.device == "cuda" ? torch::Device(torch::kCUDA, 0) : torch::kCPU;
  if (device.is_cuda()) {
    BIGBATCH_REQUIRE(torch::cuda::is_available(), InvalidArgument,
                     "--device cuda: no GPU is visible to this bigbatch (the CPU build, or no "
                     "device); build the CUDA variant (scripts/build-cuda) or use --device cpu");
  }
  if (!o.json) {
    fmt::print("# bigbatch bench optim: {}; times are medians per step\n",
               device.is_cuda() ? std::string("cuda:0") : fmt::format("{} thread(s)", threads));
    fmt::print("{:>9} {:>5} {:>7} {:>10} {:>10} {:>10} {:>8} {:>9} {:>9} {:>8} {:>8}\n", "model",
               "optim", "tensors", "values", "fused_ms", "naive_ms", "speedup", "memcpy_GBs",
               "bound_ms", "of_bound", "iters");
  }
  for (const auto& model : models) {
    torch::manual_seed(1);
    const std::vector<torch::Tensor> base = parameterSet(model);
    int64_t values = 0;
    for (const auto& t : base) values += t.numel();
    std::vector<torch::Tensor> grads;
    for (const auto& t : base) grads.push_back((1e-3 * torch::randn(t.sizes())).to(device));
    const int iterations = o.iterations > 0 ? o.iterations
                                            : static_cast<int>(std::clamp<int64_t>(
                                                  int64_t{400000000} / std::max<int64_t>(values, 1), 20, 5000));
    const double bandwidth = memcpyBandwidth(values, iterations, device);
    for (const auto& name : optimizers) {
      std::unique_ptr<Optimizer> opt[2];
      std::vector<NamedParameter> params[2];
      for (int k = 0; k < 2; ++k) {
        for (size_t i = 0; i < base.size(); ++i) {
          torch::Tensor p =
              base[i].to(device, /*non_blocking=*/false, /*copy=*/true).requires_grad_();
          p.mutable_grad() = grads[i].clone();
          params[k].push_back({fmt::format("p{}", i), p});
        }
        OptimizerOptions options;
        options.name = name;
        options.fused = k == 0;
        opt[k] = makeOptimizer(params[k], options);
      }
      BIGBATCH_CHECK(device.is_cuda() ? opt[0]->deviceFusedEligible() : opt[0]->fusedEligible(),
                     Error, "the fused path is not eligible for {} on {}", model, device.str());
      std::vector<double> t[2];
      for (int it = -3; it < iterations; ++it) {  // 3 untimed warm-up steps
        for (int k = 0; k < 2; ++k) {
          const auto t0 = Clock::now();
          opt[k]->step({1e-4});
          finish(device);
          const double s = std::chrono::duration<double>(Clock::now() - t0).count();
          if (it >= 0) t[k].push_back(s);
        }
      }
      const double fused = median(t[0]), naive = median(t[1]);
      const double bound = bytesPerValue(name) * static_cast<double>(values) / bandwidth;
      if (o.json) {
        nlohmann::ordered_json j;
        j["model"] = model;
        j["optimizer"] = name;
        j["tensors"] = base.size();
        j["values"] = values;
        j["device"] = device.str();
        j["threads"] = threads;
        j["fused_ms"] = fused * 1e3;
        j["naive_ms"] = naive * 1e3;
        j["speedup"] = naive / fused;
        j["bytes_per_value"] = bytesPerValue(name);
        j["memcpy_gb_s"] = bandwidth / 1e9;
        j["bound_ms"] = bound * 1e3;
        j["of_bound"] = bound / fused;
        j["iterations"] = iterations;
        fmt::print("{}\n", j.dump());
      } else {
        fmt::print("{:>9} {:>5} {:>7} {:>10} {:>10.3f} {:>10.3f} {:>7.2f}x {:>9.2f} {:>9.3f} {:>8.2f} {:>8}\n",
                   model, name, base.size(), values, fused * 1e3, naive * 1e3, naive / fused,
                   bandwidth / 1e9, bound * 1e3, bound / fused, iterations);
      }
      std::fflush(stdout);
    }
  }
  return 0;
}

}  // namespace bigbatch

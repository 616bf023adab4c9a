// The DDP engine in-process: bucket layout, the communication thread, the
// exchange (summed gradients equal the single-process reference), the init
// checksum, accumulation without exchange, and a failing rank's notice sent
// from the communication thread.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "bigbatch/models/model_options.h"
#include "bigbatch/optim/optimizer.h"
#include "bigbatch/train/partitioned_state.h"
#include "gradient_buckets.h"

namespace bigbatch {
namespace {

TEST(BucketLayout, ReverseOrderGreedyPacking) {
  // 4-byte elements, 40-byte buckets: params 3 (5), 2 (4) fit (36 B); 1 (20)
  // is alone and oversize; 0 (1) starts the last bucket.
  auto b = layoutBuckets({1, 20, 4, 5}, 40);
  ASSERT_EQ(b.size(), 3u);
  ASSERT_EQ(b[0].entries.size(), 2u);
  EXPECT_EQ(b[0].entries[0].param, 3u);
  EXPECT_EQ(b[0].entries[1].param, 2u);
  EXPECT_EQ(b[0].entries[1].offset, 5);
  EXPECT_EQ(b[0].numel, 9);
  EXPECT_EQ(b[1].entries[0].param, 1u);
  EXPECT_EQ(b[1].numel, 20);
  EXPECT_EQ(b[2].entries[0].param, 0u);
  int64_t total = 0;
  for (auto& x : b) total += x.numel;
  EXPECT_EQ(total, 30);
}

TEST(BucketLayout, AlignedEntriesStartAtMultiplesAndTheGapsCountInTheBucket) {
  // 16-element alignment, 300-byte buckets: param 3 (5) at 0, 2 (4) at 16,
  // 1 (20) at 32 — 52 elements; 0 (17) at 64 would end at 81 elements
  // (324 B > 300) and starts the next bucket.
  auto b = layoutBuckets({17, 20, 4, 5}, 300, 4, 16);
  ASSERT_EQ(b.size(), 2u);
  ASSERT_EQ(b[0].entries.size(), 3u);
  EXPECT_EQ(b[0].entries[0].offset, 0);
  EXPECT_EQ(b[0].entries[1].offset, 16);
  EXPECT_EQ(b[0].entries[2].offset, 32);
  EXPECT_EQ(b[0].numel, 52);
  EXPECT_EQ(b[1].entries[0].offset, 0);
  EXPECT_EQ(b[1].numel, 17);
  // Alignment 1 is the packed layout.
  auto packed = layoutBuckets({17, 20, 4, 5}, 300, 4, 1);
  EXPECT_EQ(packed[0].entries[2].offset, 9);
}

TEST(CommThread, RunsInOrderAndRethrows) {
  CommThread t;
  std::vector<int> order;
  for (int i = 0; i < 5; ++i) t.submit([&, i] { order.push_back(i); });
  t.waitAll();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  t.submit([] { throw InvalidArgument("boom"); });
  EXPECT_THROW(t.waitAll(), InvalidArgument);
}

struct Net : torch::nn::Module {
  Net() {
    a = register_module("a", torch::nn::Linear(6, 5));
    b = register_module("b", torch::nn::Linear(5, 3));
    unused = register_module("unused", torch::nn::Linear(2, 2));
  }
  torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x))); }
  torch::nn::Linear a{nullptr}, b{nullptr}, unused{nullptr};
};

// Runs fn(rank, comm, net) on `n` threads with nets built beforehand from
// `seeds[rank]` (libtorch's RNG is global, so not inside the threads).
void withRanks(int n, std::vector<int> seeds,
               const std::function<void(int, Communicator&, Net&)>& fn) {
  std::vector<std::shared_ptr<Net>> nets;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(seeds[r]);
    nets.push_back(std::make_shared<Net>());
  }
  auto comms = makeInProcessGroup(n);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(n);
  for (int r = 0; r < n; ++r) {
    comms[r]->setTimeoutMs(10000);
    threads.emplace_back([&, r] {
      try {
        fn(r, *comms[r], *nets[r]);
      } catch (...) {
        errors[r] = std::current_exception();
        comms[r]->postError("rank failed");
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

torch::Tensor inputFor(int rank) {
  return torch::arange(24, torch::kFloat32).reshape({4, 6}).add(rank).mul(0.1);
}

// The gradients of the sum of `n` ranks' losses in one process, from a Net
// seeded with 7; an unused parameter's is undefined.
std::vector<torch::Tensor> referenceGradients(int n) {
  torch::manual_seed(7);
  Net ref;
  torch::Tensor total = torch::zeros({});
  for (int r = 0; r < n; ++r) total = total + ref.forward(inputFor(r)).pow(2).sum();
  total.backward();
  std::vector<torch::Tensor> want;
  for (auto& p : ref.parameters()) want.push_back(p.grad().defined() ? p.grad().clone() : torch::Tensor());
  return want;
}

TEST(Ddp, SummedGradientsMatchReferenceAcrossBuckets) {
  const int n = 3;
  const std::vector<torch::Tensor> want = referenceGradients(n);

  for (bool overlap : {true, false}) {
    withRanks(n, {7, 7, 7}, [&](int r, Communicator& comm, Net& net) {
      DdpOptions o;
      o.fusionBytes = 64;  // several buckets
      o.overlap = overlap;
      o.allreduce = "ring";
      JobCollectives job(comm);
      DistributedDataParallel ddp(net, job, o);
      EXPECT_GT(ddp.buckets().size(), 2u);
      ddp.verifyIdentical();
      for (int round = 0; round < 2; ++round) {  // zeroGrad must reset the buckets
        ddp.zeroGrad();
        ddp.beginBackward(true);
        net.forward(inputFor(r)).pow(2).sum().backward();
        ddp.finishBackward();
        auto params = net.parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          if (!want[i].defined()) {
            EXPECT_EQ(params[i].grad().abs().max().item<float>(), 0.f);  // unused: zeros
            continue;
          }
          EXPECT_TRUE(torch::allclose(params[i].grad(), want[i], 1e-5, 1e-6))
              << "rank " << r << " param " << i << " overlap " << overlap;
        }
      }
    });
  }
}

// A lone rank on the CPU steps exactly as each of N ranks: its gradients
// stay bucket views. Unbound buckets (a lone rank on a GPU, where nothing
// is exchanged) leave the gradients to autograd: zero() leaves none,
// backward's AccumulateGrad keeps its own tensors, and the values are the
// bucketed run's — two ranks with the same input sum exactly twice them
// (x + x), as one rank's two accumulated micro-batches do.
TEST(Ddp, OneRankKeepsViewsOnTheCpuAndUnboundBucketsLeaveTheGradientsToAutograd) {
  std::vector<torch::Tensor> twoRanks;
  withRanks(2, {7, 7}, [&](int r, Communicator& comm, Net& net) {
    DdpOptions o;
    o.fusionBytes = 64;
    o.allreduce = "ring";
    JobCollectives job(comm);
    DistributedDataParallel ddp(net, job, o);
    ddp.zeroGrad();
    ddp.beginBackward(true);
    net.forward(inputFor(0)).pow(2).sum().backward();
    ddp.finishBackward();
    if (r != 0) return;
    for (auto& p : net.parameters()) {
      EXPECT_TRUE(p.grad().is_view()) << "two ranks: the gradients are views into the buckets";
      twoRanks.push_back(p.grad().clone());
    }
  });
  withRanks(1, {7}, [&](int, Communicator& comm, Net& net) {
    DdpOptions o;
    o.fusionBytes = 64;
    JobCollectives job(comm);
    DistributedDataParallel ddp(net, job, o);
    ddp.zeroGrad();
    for (auto& p : net.parameters()) EXPECT_TRUE(p.grad().is_view()) << "one rank on the CPU";
  });
  withRanks(1, {7}, [&](int, Communicator&, Net& net) {
    ddp_detail::GradientBuckets buckets(net, /*bindGradients=*/false);
    buckets.layoutFor(64);  // a layout of several buckets, never allocated
    EXPECT_GT(buckets.layout().size(), 2u);
    for (int round = 0; round < 2; ++round) {  // round 2: nothing left over from round 1
      buckets.zero();
      for (auto& p : net.parameters()) EXPECT_FALSE(p.grad().defined()) << "round " << round;
      for (int micro = 0; micro < 2; ++micro) {  // accumulation adds into autograd's tensor
        net.forward(inputFor(0)).pow(2).sum().backward();
      }
      auto params = net.parameters();
      ASSERT_EQ(params.size(), twoRanks.size());
      for (size_t i = 0; i < params.size(); ++i) {
        if (!params[i].grad().defined()) {  // a parameter the forward does not use
          EXPECT_EQ(twoRanks[i].abs().max().item<float>(), 0.f) << "param " << i;
          continue;
        }
        EXPECT_FALSE(params[i].grad().is_view()) << "param " << i << ": a bucket view";
        EXPECT_TRUE(torch::equal(params[i].grad(), twoRanks[i])) << "param " << i;
      }
    }
  });
}

TEST(Ddp, AccumulationExchangesOnlyOnTheLastMicroBatch) {
  withRanks(2, {3, 3}, [&](int r, Communicator& comm, Net& net) {
    JobCollectives job(comm);
    DistributedDataParallel ddp(net, job, DdpOptions{});
    ddp.zeroGrad();
    ddp.beginBackward(false);
    net.forward(inputFor(r)).sum().backward();
    EXPECT_EQ(ddp.finishBackward(), 0.0);  // nothing exchanged
    torch::Tensor local = net.a->weight.grad().clone();
    auto other = job.allreduceSum({local.sum().item<double>()})[0];
    ddp.beginBackward(true);
    net.forward(inputFor(r)).sum().backward();
    ddp.finishBackward();
    // Both micro-batches of both ranks: twice the sum of the ranks' local sums.
    EXPECT_NEAR(net.a->weight.grad().sum().item<double>(), 2 * other, 1e-3);
  });
}

TEST(Ddp, ChecksumNamesTheDifferingTensor) {
  std::atomic<int> caught{0};
  EXPECT_THROW(withRanks(2, {1, 2}, [&](int, Communicator& comm, Net& net) {
                 JobCollectives job(comm);
                 DistributedDataParallel ddp(net, job, DdpOptions{});
                 try {
                   ddp.verifyIdentical();
                 } catch (const MismatchError& e) {
                   EXPECT_NE(std::string(e.what()).find("'a.weight'"), std::string::npos) << e.what();
                   ++caught;
                   throw;
                 }
               }),
               MismatchError);
  EXPECT_EQ(caught.load(), 2);
}

TEST(Ddp, AverageBuffersAndScalarCollectives) {
  withRanks(2, {1, 1}, [&](int r, Communicator& comm, Net& net) {
    auto bn = net.register_module("bn", torch::nn::BatchNorm1d(3));
    {
      torch::NoGradGuard g;
      bn->running_mean.fill_(r == 0 ? 1.0 : 3.0);
    }
    JobCollectives job(comm);
    DistributedDataParallel ddp(net, job, DdpOptions{});
    job.averageBuffers(net);
    EXPECT_FLOAT_EQ(bn->running_mean[0].item<float>(), 2.0f);
    EXPECT_DOUBLE_EQ(job.allreduceMax({double(r), -1.5})[0], 1.0);
    EXPECT_DOUBLE_EQ(job.allreduceMin({double(r), -1.5})[1], -1.5);
    EXPECT_NEAR(job.allreduceSum({0.1 + r})[0], 1.2, 1e-12);
  });
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

// Gradients near fp16's limit (65504) summed over 4 ranks would overflow a
// plain fp16 sum (4 x 40000 = 160000); pre-division by the world size keeps
// every partial sum in range and the fp32 result is within fp16 rounding.
TEST(Ddp, HalfExchangeDoesNotOverflowWithPreDivision) {
  for (DataType t : {DataType::kFloat16, DataType::kBFloat16}) {
    withRanks(4, {5, 5, 5, 5}, [&](int r, Communicator& comm, Net& net) {
      DdpOptions o;
      o.exchangeType = t;
      JobCollectives job(comm);
      DistributedDataParallel ddp(net, job, o);
      ddp.zeroGrad();
      ddp.beginBackward(true);
      // d/dw of sum(w) * 40000 = 40000 in every element.
      net.a->weight.sum().mul(40000.0 + r).backward();
      ddp.finishBackward();
      const torch::Tensor g = net.a->weight.grad();
      const double want = 4 * 40000.0 + 6;  // 160006
      EXPECT_TRUE(torch::isfinite(g).all().item<bool>()) << dataTypeName(t);
      EXPECT_NEAR(g.max().item<double>(), want, want * (t == DataType::kFloat16 ? 2e-3 : 1e-2))
          << dataTypeName(t);
      EXPECT_NEAR(g.min().item<double>(), want, want * (t == DataType::kFloat16 ? 2e-3 : 1e-2));
    });
  }
}

TEST(Ddp, HalfExchangeMatchesFloatExchangeWithinRounding) {
  std::vector<torch::Tensor> ref;
  for (DataType t : {DataType::kFloat32, DataType::kFloat16}) {
    withRanks(2, {9, 9}, [&](int r, Communicator& comm, Net& net) {
      DdpOptions o;
      o.exchangeType = t;
      o.fusionBytes = 64;
      JobCollectives job(comm);
      DistributedDataParallel ddp(net, job, o);
      ddp.zeroGrad();
      ddp.beginBackward(true);
      net.forward(inputFor(r)).pow(2).sum().backward();
      ddp.finishBackward();
      if (r != 0) return;
      auto params = net.parameters();
      for (size_t i = 0; i < params.size(); ++i) {
        if (t == DataType::kFloat32) {
          ref.push_back(params[i].grad().clone());
        } else {
          // fp16 keeps 11 significant bits: relative error <= 2^-11 per rounding.
          EXPECT_TRUE(torch::allclose(params[i].grad(), ref[i], 2e-3, 1e-4)) << "param " << i;
        }
      }
    });
  }
}

// The host-staged exchange (device_staging.h; the GPU path without NCCL),
// run here on CPU buckets: each bucket goes through its own host mirror and
// back, so the gradients must equal the unstaged exchange's bit for bit —
// with overlap and without, fp32 and fp16 on the wire, several buckets, an
// unused parameter and two rounds.
TEST(Ddp, HostStagedExchangeEqualsTheDirectOneBitForBit) {
  for (DataType type : {DataType::kFloat32, DataType::kFloat16}) {
    for (bool overlap : {true, false}) {
      std::vector<std::vector<torch::Tensor>> direct(2), staged(2);
      for (bool stage : {false, true}) {
        withRanks(3, {7, 7, 7}, [&](int r, Communicator& comm, Net& net) {
          DdpOptions o;
          o.fusionBytes = 64;
          o.overlap = overlap;
          o.exchangeType = type;
          o.allreduce = "ring";
          o.stageThroughHost = stage;
          JobCollectives job(comm);
          DistributedDataParallel ddp(net, job, o);
          for (int round = 0; round < 2; ++round) {
            ddp.zeroGrad();
            ddp.beginBackward(true);
            net.forward(inputFor(r).mul(round + 1)).pow(2).sum().backward();
            ddp.finishBackward();
            if (r != 1) continue;
            for (auto& p : net.parameters())
              (stage ? staged : direct)[round].push_back(p.grad().clone());
          }
        });
      }
      for (int round = 0; round < 2; ++round) {
        ASSERT_EQ(staged[round].size(), direct[round].size());
        for (size_t i = 0; i < direct[round].size(); ++i) {
          EXPECT_TRUE(torch::equal(staged[round][i], direct[round][i]))
              << dataTypeName(type) << " overlap " << overlap << " round " << round << " param "
              << i;
        }
      }
    }
  }
}

// The partitioned exchange through the host mirrors (what a model on a GPU
// takes: the slices and their optimizer in host memory, ZeRO-Offload's
// split), run here on CPU buckets: three optimizer steps of SGD, LARS and
// LAMB on 3 ranks, with fp32 and fp16 on the wire, must leave every rank's
// weights and the whole optimizer state (a checkpoint's form) bit for bit
// those of the partition in the model's own storage — the mirrors carry
// the same values through the same arithmetic.
TEST(Ddp, StagedPartitionStepsEqualTheDirectPartitionBitForBit) {
  for (const std::string name : {"sgd", "lars", "lamb"}) {
    for (DataType wire : {DataType::kFloat32, DataType::kFloat16}) {
      std::vector<torch::Tensor> weights[2];
      NamedTensors state[2];
      for (bool stage : {false, true}) {
        withRanks(3, {7, 7, 7}, [&](int r, Communicator& comm, Net& net) {
          DdpOptions o;
          o.fusionBytes = 64;  // several buckets; layers split across ranks
          o.partition = true;
          o.stageThroughHost = stage;
          o.exchangeType = wire;
          o.allreduce = "ring";
          JobCollectives job(comm);
          DistributedDataParallel ddp(net, job, o);
          OptimizerOptions oo;
          oo.name = name;
          std::unique_ptr<Optimizer> opt = makeRunOptimizer(net, ddp, oo);
          for (int step = 0; step < 3; ++step) {
            ddp.waitWeights();
            ddp.zeroGrad();
            ddp.beginBackward(true);
            net.forward(inputFor(r).mul(step + 1)).pow(2).sum().backward();
            ddp.finishBackward();
            StepHyper h;
            h.lr = name == "lamb" ? 0.01 : 0.1;
            ASSERT_TRUE(opt->step(h).applied);
            ddp.gatherWeights();
          }
          ddp.waitWeights();
          NamedTensors whole = wholeOptimizerState(*opt, ddp);  // collective
          if (r != 2) return;
          for (auto& p : net.parameters()) weights[stage].push_back(p.detach().clone());
          state[stage] = std::move(whole);
        });
      }
      const std::string what = name + " " + dataTypeName(wire);
      ASSERT_EQ(weights[1].size(), weights[0].size()) << what;
      for (size_t i = 0; i < weights[0].size(); ++i) {
        EXPECT_TRUE(torch::equal(weights[1][i], weights[0][i])) << what << " param " << i;
      }
      ASSERT_EQ(state[1].size(), state[0].size()) << what;
      for (size_t i = 0; i < state[0].size(); ++i) {
        EXPECT_EQ(state[1][i].first, state[0][i].first) << what;
        EXPECT_TRUE(torch::equal(state[1][i].second, state[0][i].second))
            << what << " " << state[0][i].first;
      }
      // Not vacuous: the steps moved the weights.
      torch::manual_seed(7);
      Net initial;
      EXPECT_FALSE(torch::equal(weights[1][0], initial.parameters()[0])) << what;
    }
  }
}

TEST(Ddp, PartitionedShardsTileTheModelAndHoldTheSummedGradients) {
  const int n = 3;
  std::vector<torch::Tensor> want = referenceGradients(n);
  std::vector<std::vector<int>> owners;  // per param, per element: how many ranks own it
  {
    Net shapes;  // the parameters' shapes
    auto params = shapes.parameters();
    for (size_t i = 0; i < params.size(); ++i) {
      if (!want[i].defined()) want[i] = torch::zeros_like(params[i]);  // unused: exchanged zeros
      owners.emplace_back(params[i].numel(), 0);
    }
  }
  std::mutex m;
  for (int variant = 0; variant < 4; ++variant) {
    const DataType wire = variant % 2 ? DataType::kFloat16 : DataType::kFloat32;
    const bool stage = variant >= 2;  // through the host mirrors (a model on a GPU)
    for (auto& o : owners) std::fill(o.begin(), o.end(), 0);
    withRanks(n, {7, 7, 7}, [&](int r, Communicator& comm, Net& net) {
      DdpOptions o;
      o.fusionBytes = 64;  // several buckets; layers split across ranks
      o.partition = true;
      o.exchangeType = wire;
      o.stageThroughHost = stage;
      JobCollectives job(comm);
      DistributedDataParallel ddp(net, job, o);
      ASSERT_TRUE(ddp.partitioned());
      ddp.verifyIdentical();
      ddp.zeroGrad();
      ddp.beginBackward(true);
      net.forward(inputFor(r)).pow(2).sum().backward();
      ddp.finishBackward();
      auto params = net.parameters();
      // Re-pointed into the buckets, every parameter still starts 64-byte
      // aligned, as kernels that vectorise their loads need (cuDNN's NHWC
      // BatchNorm faulted on an H200 without it).
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(params[i].data_ptr()) % 64, 0u) << "param " << i;
      }
      for (const ParameterShard& s : ddp.shards()) {
        // The slice is a view of the parameter's own storage, or staged one
        // of its host mirror holding the same values.
        if (stage) {
          EXPECT_NE(s.weight.data_ptr<float>(), params[s.param].data_ptr<float>() + s.begin);
          EXPECT_TRUE(
              torch::equal(s.weight, params[s.param].reshape({-1}).narrow(0, s.begin, s.numel)))
              << s.name;
        } else {
          EXPECT_EQ(s.weight.data_ptr<float>(), params[s.param].data_ptr<float>() + s.begin);
        }
        const torch::Tensor expect = want[s.param].reshape({-1}).narrow(0, s.begin, s.numel);
        const double tol = wire == DataType::kFloat32 ? 1e-5 : 2e-3;
        EXPECT_TRUE(torch::allclose(s.grad, expect, tol, tol * 0.1))
            << "rank " << r << " " << s.name << " " << dataTypeName(wire) << " staged " << stage;
        std::lock_guard<std::mutex> lock(m);
        for (int64_t i = s.begin; i < s.begin + s.numel; ++i) ++owners[s.param][i];
      }
      // Each rank writes its rank into its slices; the all-gather must give
      // every rank the owner's value everywhere.
      {
        torch::NoGradGuard noGrad;
        for (const ParameterShard& s : ddp.shards()) s.weight.fill_(static_cast<float>(r + 1));
      }
      ddp.gatherWeights();
      ddp.waitWeights();
      std::vector<torch::Tensor> mine;
      for (const ParameterShard& s : ddp.shards()) mine.push_back(s.weight * 10);
      const std::vector<torch::Tensor> whole = ddp.gatherShards(mine);
      ASSERT_EQ(whole.size(), params.size());
      for (size_t i = 0; i < params.size(); ++i) {
        EXPECT_TRUE(torch::equal(whole[i], params[i] * 10)) << "param " << i;
        EXPECT_EQ(whole[i].sizes(), params[i].sizes());
        EXPECT_GE(params[i].min().item<float>(), 1.f);  // every element came from some rank
      }
    });
    for (size_t i = 0; i < owners.size(); ++i) {
      for (int c : owners[i]) EXPECT_EQ(c, 1) << "param " << i << ": owned by " << c << " ranks";
    }
  }
}

// Fusion autotuning: four 128x128 layers (264 KB of gradients) give the
// candidates 16, 64, 256 KiB and 1 MiB (the first holding everything in one
// bucket); with 2 timed steps each after one untimed, the choice is made at
// the end of step 12, the same on every rank, and every re-layout keeps the
// summed gradients exact.
TEST(Ddp, FusionAutotuneTimesEachCandidateAndAllRanksAgree) {
  struct Deep : torch::nn::Module {
    Deep() {
      for (int i = 0; i < 4; ++i)
        layers.push_back(register_module("l" + std::to_string(i), torch::nn::Linear(128, 128)));
    }
    torch::Tensor forward(torch::Tensor x) {
      for (auto& l : layers) x = torch::tanh(l(x));
      return x;
    }
    std::vector<torch::nn::Linear> layers;
  };
  const int n = 2;
  std::vector<std::shared_ptr<Deep>> nets;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(4);
    nets.push_back(std::make_shared<Deep>());
  }
  // The reference gradient of the summed loss, one process.
  torch::manual_seed(4);
  Deep ref;
  torch::Tensor total = torch::zeros({});
  for (int r = 0; r < n; ++r)
    total = total + ref.forward(torch::ones({8, 128}) * (r + 1) * 0.1).sum();
  total.backward();
  auto comms = makeInProcessGroup(n);
  std::vector<size_t> chosen(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      DdpOptions o;
      o.fusionBytes = 0;  // auto
      o.tuneSteps = 2;
      o.allreduce = "ring";
      JobCollectives job(*comms[r]);
      DistributedDataParallel ddp(*nets[r], job, o);
      EXPECT_EQ(ddp.fusionBytes(), size_t{16} << 10);
      std::set<size_t> seen;
      for (int step = 1; step <= 13; ++step) {
        ddp.zeroGrad();
        seen.insert(ddp.fusionBytes());
        ddp.beginBackward(true);
        nets[r]->forward(torch::ones({8, 128}) * (r + 1) * 0.1).sum().backward();
        ddp.finishBackward();
        EXPECT_EQ(ddp.fusionSettled(), step >= 12) << "rank " << r << " step " << step;
        auto params = nets[r]->parameters(), want = ref.parameters();
        for (size_t i = 0; i < params.size(); ++i) {
          EXPECT_TRUE(torch::allclose(params[i].grad(), want[i].grad(), 1e-5, 1e-6))
              << "rank " << r << " step " << step << " param " << i;
        }
      }
      EXPECT_EQ(seen, (std::set<size_t>{16 << 10, 64 << 10, 256 << 10, 1 << 20})) << "rank " << r;
      chosen[r] = ddp.fusionBytes();
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(chosen[0], chosen[1]);
  EXPECT_TRUE(chosen[0] == (16u << 10) || chosen[0] == (64u << 10) || chosen[0] == (256u << 10) ||
              chosen[0] == (1u << 20))
      << chosen[0];
}

// Overlap that happens: the default recipe's model (models/small_cnn), 64
// images per rank, 16 KiB buckets. Backward produces the classifier's
// gradients first and the first convolutions' last, so the first buckets
// are full — and handed to the communication thread — while backward still
// runs through the convolutions: on every rank some bucket's exchange must
// start before loss.backward() returns. (Without overlap none may.)
TEST(Ddp, BucketsAreExchangedWhileBackwardStillRuns) {
  const int n = 2;
  for (bool overlap : {true, false}) {
    std::vector<std::shared_ptr<ImageClassifierImpl>> nets;
    for (int r = 0; r < n; ++r) {
      torch::manual_seed(3);
      ModelOptions mo;
      mo.inChannels = 1;
      mo.numClasses = 10;
      nets.push_back(buildModel(mo));
    }
    auto comms = makeInProcessGroup(n);
    std::vector<int> early(n, 0), exchanges(n, 0), buckets(n, 0);
    std::vector<std::thread> threads;
    for (int r = 0; r < n; ++r) {
      threads.emplace_back([&, r] {
        using Clock = std::chrono::steady_clock;
        std::vector<Clock::time_point> starts;
        std::mutex m;
        DdpOptions o;
        o.fusionBytes = 16 << 10;
        o.overlap = overlap;
        o.onExchange = [&](size_t, size_t, Clock::time_point start, Clock::time_point, bool) {
          std::lock_guard<std::mutex> lock(m);
          starts.push_back(start);
        };
        JobCollectives job(*comms[r]);
        DistributedDataParallel ddp(*nets[r], job, o);
        buckets[r] = static_cast<int>(ddp.buckets().size());
        torch::manual_seed(10 + r);
        const torch::Tensor x = torch::randn({64, 1, 28, 28});
        for (int step = 0; step < 3; ++step) {
          ddp.zeroGrad();
          ddp.beginBackward(true);
          nets[r]->forward(x).pow(2).mean().backward();
          const auto backwardEnd = Clock::now();
          ddp.finishBackward();
          std::lock_guard<std::mutex> lock(m);
          for (const auto& t : starts) early[r] += t < backwardEnd;
          exchanges[r] += static_cast<int>(starts.size());
          starts.clear();
        }
      });
    }
    for (auto& t : threads) t.join();
    for (int r = 0; r < n; ++r) {
      EXPECT_GE(buckets[r], 3) << "the default model in 16 KiB buckets";
      EXPECT_EQ(exchanges[r], 3 * buckets[r]) << "rank " << r;
      if (overlap) {
        EXPECT_GT(early[r], 0) << "rank " << r << ": no bucket's exchange started during backward";
      } else {
        EXPECT_EQ(early[r], 0) << "rank " << r << ": ddp.overlap = false exchanged during backward";
      }
    }
  }
}

}  // namespace
}  // namespace bigbatch

namespace bigbatch {
namespace {

TEST(CommThread, RunAfterFailureRunsAfterAnErrorWithoutRethrowingIt) {
  CommThread t;
  std::vector<int> order;
  t.submit([] { throw InvalidArgument("the exchange broke"); });
  t.submit([&] { order.push_back(1); });  // skipped: the exchange is broken
  t.runAfterFailure([&] { order.push_back(2); });
  t.runAfterFailure([] { throw IoError("the notice failed too"); });  // swallowed
  EXPECT_EQ(order, (std::vector<int>{2}));
  EXPECT_THROW(t.waitAll(), InvalidArgument);  // the first error stays
}

// Forwards to a communicator and records how many threads are inside it at
// once (MPI_THREAD_SERIALIZED allows one). Each send sleeps, so exchanges
// stay in flight long enough for a second thread to collide with them.
class SerialisationChecker : public Communicator {
 public:
  explicit SerialisationChecker(Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  int localRank() const override { return inner_.localRank(); }
  int localSize() const override { return inner_.localSize(); }
  std::string transportName() const override { return inner_.transportName(); }
  size_t segmentBytes() const override { return inner_.segmentBytes(); }
  bool pollsRequests() const override { return inner_.pollsRequests(); }
  std::unique_ptr<Request> isend(const void* data, size_t bytes, int peer, int tag) override {
    Inside in(*this);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return std::make_unique<CheckedRequest>(*this, inner_.isend(data, bytes, peer, tag));
  }
  std::unique_ptr<Request> irecv(void* data, size_t bytes, int peer, int tag) override {
    Inside in(*this);
    return std::make_unique<CheckedRequest>(*this, inner_.irecv(data, bytes, peer, tag));
  }
  std::unique_ptr<Communicator> split(int color, int key) override {
    return inner_.split(color, key);
  }
  void pollPeerErrors() override {
    Inside in(*this);
    inner_.pollPeerErrors();
  }
  void postError(const std::string& message) override {
    Inside in(*this);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    inner_.postError(message);
  }
  int mostThreadsInside() const { return most_.load(); }

 protected:
  int hostColor() override { return 0; }

 private:
  struct Inside {
    explicit Inside(SerialisationChecker& c) : c_(c) {
      const int now = ++c_.inside_;
      int most = c_.most_.load();
      while (now > most && !c_.most_.compare_exchange_weak(most, now)) {
      }
    }
    ~Inside() { --c_.inside_; }
    SerialisationChecker& c_;
  };
  class CheckedRequest : public Request {
   public:
    CheckedRequest(SerialisationChecker& c, std::unique_ptr<Request> r)
        : c_(c), r_(std::move(r)) {}
    void wait() override {
      Inside in(c_);
      r_->wait();
    }
    bool test() override {
      Inside in(c_);
      return r_->test();
    }

   private:
    SerialisationChecker& c_;
    std::unique_ptr<Request> r_;
  };
  Communicator& inner_;
  std::atomic<int> inside_{0}, most_{0};
};

// A rank that fails while its gradient buckets are still being exchanged
// tells the others through the communication thread: the communicator is
// never entered by two threads at once, and the peer's wait ends with the
// notice instead of at its deadline.
TEST(Ddp, PostErrorWaitsForTheExchangeInFlight) {
  // Every parameter takes part (Net's unused layer would hold every bucket
  // back until finishBackward), so buckets leave during backward.
  struct TwoLayers : torch::nn::Module {
    TwoLayers() {
      a = register_module("a", torch::nn::Linear(6, 5));
      b = register_module("b", torch::nn::Linear(5, 3));
    }
    torch::Tensor forward(torch::Tensor x) { return b(torch::relu(a(x))); }
    torch::nn::Linear a{nullptr}, b{nullptr};
  };
  std::vector<std::shared_ptr<TwoLayers>> nets;
  for (int r = 0; r < 2; ++r) {
    torch::manual_seed(11);
    nets.push_back(std::make_shared<TwoLayers>());
  }
  auto comms = makeInProcessGroup(2);
  SerialisationChecker checked(*comms[0]);
  std::string peerSaw;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    comms[r]->setTimeoutMs(20000);
    threads.emplace_back([&, r] {
      Communicator& comm = r == 0 ? static_cast<Communicator&>(checked) : *comms[r];
      DdpOptions o;
      o.fusionBytes = 64;  // several buckets, in flight on the communication thread
      o.allreduce = "ring";
      JobCollectives job(comm);
      DistributedDataParallel ddp(*nets[r], job, o);
      EXPECT_GE(ddp.buckets().size(), 3u);
      ddp.zeroGrad();
      ddp.beginBackward(true);
      nets[r]->forward(inputFor(r)).pow(2).sum().backward();
      if (r == 0) {
        job.postError("rank 0 gave up in the middle of its step");
        return;
      }
      try {
        ddp.finishBackward();  // rank 0 never reduces the last bucket
      } catch (const MismatchError& e) {
        peerSaw = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(checked.mostThreadsInside(), 1);
  EXPECT_NE(peerSaw.find("rank 0 gave up"), std::string::npos) << peerSaw;
}

}  // namespace
}  // namespace bigbatch

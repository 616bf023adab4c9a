// The DDP engine's exchange variants in-process: fp16/bf16 on the wire,
// the host-staged exchange, the partitioned exchange and its shards, fusion
// autotuning, and buckets exchanged while backward still runs.
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
#include "ddp_test_support.h"
#include "gradient_buckets.h"

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
      backwardStep(ddp, net, inputFor(r));
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
            backwardStep(ddp, net, inputFor(r).mul(round + 1));
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
            backwardStep(ddp, net, inputFor(r).mul(step + 1));
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
      backwardStep(ddp, net, inputFor(r));
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

// The DDP engine in-process: bucket layout, the communication thread, the
// exchange (summed gradients equal the single-process reference), the init
// checksum, accumulation without exchange. The exchange's variants are in
// ddp_exchange_test.cpp, a failing rank in ddp_failure_test.cpp.
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
        backwardStep(ddp, net, inputFor(r));
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
    backwardStep(ddp, net, inputFor(0));
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

// The "bigbatch" torch.distributed backend's C++ core on in-process ranks
// (no Python, no MPI): every collective and dtype against the exact result
// of rank-derived inputs; a mismatched call raises on every rank, naming
// each rank's call; a future's callback that waits on a nested collective
// (DDP's PowerSGD hook does) completes instead of deadlocking; a comm
// hook's bucket comes back as the mean; a failure breaks the group for
// every later call; a Work is completed only with its future, and
// wait(timeout) keeps one deadline over both; a group whose last reference
// is dropped inside its own future's callback ends there.
#include "process_group_bigbatch.h"

#include <gtest/gtest.h>

#include <future>
#include <thread>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"

namespace bigbatch::torch_backend {
namespace {

using Group = c10::intrusive_ptr<ProcessGroupBigbatch>;

// fn(rank, group) on n threads, each with its group over in-process ranks.
void onRanks(int n, const std::function<void(int, ProcessGroupBigbatch&)>& fn,
             bool heartbeat = false) {
  auto comms = makeInProcessGroup(n);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      setThreadErrorRank(r);
      try {
        BackendOptions o;
        o.timeout = std::chrono::seconds(10);
        o.heartbeat = heartbeat;
        Group g = c10::make_intrusive<ProcessGroupBigbatch>(std::move(comms[r]), r, n, o);
        fn(r, *g);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

void waitOn(const c10::intrusive_ptr<::c10d::Work>& w) { w->wait(); }

// Rank r holds r + 1 + (i mod 4) at element i: every sum, product, max and
// min of 3 ranks is an integer below 256, exact in every type (bfloat16's 8
// significant bits included), whatever the order.
at::Tensor rankValues(int r, int64_t count, at::ScalarType type) {
  return (at::arange(count, at::kDouble).remainder(4) + (r + 1)).to(type);
}

TEST(TorchBackend, AllreduceEveryTypeAndOpIsExact) {
  for (int n : {2, 3}) {
    onRanks(n, [n](int r, ProcessGroupBigbatch& g) {
      for (auto type : {at::kFloat, at::kDouble, at::kHalf, at::kBFloat16, at::kLong, at::kInt,
                        at::kByte}) {
        for (auto op : {::c10d::ReduceOp::SUM, ::c10d::ReduceOp::MAX, ::c10d::ReduceOp::MIN,
                        ::c10d::ReduceOp::PRODUCT}) {
          std::vector<at::Tensor> t = {rankValues(r, 37, type)};
          ::c10d::AllreduceOptions o;
          o.reduceOp = op;
          waitOn(g.allreduce(t, o));
          const at::Tensor i = at::arange(37, at::kDouble).remainder(4);
          at::Tensor want;
          if (op == ::c10d::ReduceOp::SUM) want = i * n + n * (n + 1) / 2;
          if (op == ::c10d::ReduceOp::MAX) want = i + n;
          if (op == ::c10d::ReduceOp::MIN) want = i + 1;
          if (op == ::c10d::ReduceOp::PRODUCT) {
            want = at::ones({37}, at::kDouble);
            for (int k = 1; k <= n; ++k) want = want * (i + k);
          }
          // What the type holds of it (uint8 and 16-bit products wrap or round alike on every rank).
          EXPECT_TRUE(at::equal(t[0], want.to(type)))
              << n << " ranks, " << c10::toString(type) << ", op " << static_cast<int>(op);
        }
      }
      // AVG of floats: the sum over n; of integers: refused, naming the fix.
      std::vector<at::Tensor> f = {rankValues(r, 8, at::kFloat)};
      ::c10d::AllreduceOptions avg;
      avg.reduceOp = ::c10d::ReduceOp::AVG;
      waitOn(g.allreduce(f, avg));
      EXPECT_TRUE(at::allclose(f[0], (at::arange(8, at::kFloat).remainder(4) * n + n * (n + 1) / 2) / n));
      std::vector<at::Tensor> k = {rankValues(r, 8, at::kLong)};
      try {
        waitOn(g.allreduce(k, avg));
        ADD_FAILURE() << "AVG of int64 ran";
      } catch (const std::exception& e) {
        EXPECT_NE(std::string(e.what()).find("use ReduceOp.SUM and divide"), std::string::npos)
            << e.what();
      }
    });
  }
}

TEST(TorchBackend, BroadcastAllgatherReduceScatterAndBarrier) {
  for (int n : {2, 3}) {
    onRanks(n, [n](int r, ProcessGroupBigbatch& g) {
      std::vector<at::Tensor> b = {at::full({5}, r == 1 ? 7 : -1, at::kInt)};
      ::c10d::BroadcastOptions bo;
      bo.rootRank = 1;
      waitOn(g.broadcast(b, bo));
      EXPECT_TRUE(at::equal(b[0], at::full({5}, 7, at::kInt)));

      std::vector<at::Tensor> in = {at::full({2, 3}, r, at::kHalf)};
      std::vector<std::vector<at::Tensor>> out(1);
      for (int k = 0; k < n; ++k) out[0].push_back(at::empty({2, 3}, at::kHalf));
      waitOn(g.allgather(out, in));
      for (int k = 0; k < n; ++k) EXPECT_TRUE(at::equal(out[0][k], at::full({2, 3}, k, at::kHalf)));

      at::Tensor flat = at::empty({n * 4}, at::kLong), mine = at::full({4}, r, at::kLong);
      waitOn(g._allgather_base(flat, mine));
      EXPECT_TRUE(at::equal(flat, at::arange(n, at::kLong).repeat_interleave(4)));

      // Rank r sends (r + 1)·(c + 1) to rank c: rank c gets (c + 1)·n(n+1)/2.
      for (auto type : {at::kFloat, at::kLong}) {
        std::vector<std::vector<at::Tensor>> parts(1);
        for (int c = 0; c < n; ++c) parts[0].push_back(at::full({3}, (r + 1) * (c + 1), type));
        std::vector<at::Tensor> got = {at::empty({3}, type)};
        waitOn(g.reduce_scatter(got, parts));
        EXPECT_TRUE(at::equal(got[0], at::full({3}, (r + 1) * n * (n + 1) / 2, type)))
            << c10::toString(type);
      }
      waitOn(g.barrier());
    });
  }
}

TEST(TorchBackend, AMismatchedCallRaisesOnEveryRankNamingEachCall) {
  std::vector<std::string> messages(3);
  onRanks(3, [&](int r, ProcessGroupBigbatch& g) {
    std::vector<at::Tensor> t = {at::ones({r == 2 ? 12 : 10})};
    try {
      waitOn(g.allreduce(t));
      ADD_FAILURE() << "rank " << r << ": a mismatched allreduce ran";
    } catch (const std::exception& e) {
      messages[static_cast<size_t>(r)] = e.what();
    }
    // The group is broken from then on, saying why.
    try {
      waitOn(g.barrier());
      ADD_FAILURE() << "a barrier ran on a broken group";
    } catch (const std::exception& e) {
      EXPECT_NE(std::string(e.what()).find("failed earlier"), std::string::npos) << e.what();
    }
  });
  for (const std::string& m : messages) {
    EXPECT_NE(m.find("rank 0: allreduce (SUM) of 10 Float element(s); rank 1: allreduce (SUM) of "
                     "10 Float element(s); rank 2: allreduce (SUM) of 12 Float element(s)"),
              std::string::npos)
        << m;
  }
}

// DDP's PowerSGD hook waits, inside a future's callback, on a collective of
// its own: completed on the communication thread that collective could
// never run. Here every rank's callback does the same.
TEST(TorchBackend, ANestedWaitInsideACallbackCompletes) {
  onRanks(2, [](int r, ProcessGroupBigbatch& g) {
    std::vector<at::Tensor> t = {at::ones({4})};
    auto future = g.allreduce(t)->getFuture();
    auto chained = future->then(
        [&g](c10::ivalue::Future& f) {
          std::vector<at::Tensor> inner = {f.value().toTensorVector()[0].clone()};
          g.allreduce(inner)->getFuture()->wait();  // nested, blocking
          return c10::IValue(inner[0]);
        },
        c10::TensorType::get());
    chained->wait();
    EXPECT_TRUE(at::equal(chained->value().toTensor(), at::full({4}, 4.0)));
  });
}

// A comm hook's bucket through the 16-bit wire and PowerSGD: the mean.
TEST(TorchBackend, AHooksBucketComesBackAsTheMean) {
  onRanks(2, [](int r, ProcessGroupBigbatch& g) {
    CodecSpec fp16;
    fp16.wireType = DataType::kFloat16;
    const int half = g.codecs().add(fp16);
    at::Tensor bucket = at::full({6}, r == 0 ? 1.0 : 3.0);  // exact in fp16
    waitOn(g.compressedAllreduce(bucket, half, 0, {{0, 6, {2, 3}, "w"}}));
    EXPECT_TRUE(at::equal(bucket, at::full({6}, 2.0)));

    CodecSpec psgd;
    psgd.powerSgd = true;
    psgd.powerSgdOptions.rank = 64;  // full rank of a 64 x 64 matrix: the sum comes back
    psgd.powerSgdOptions.minCompressionRate = 0;
    psgd.powerSgdOptions.errorFeedback = false;
    const int codec = g.codecs().add(psgd);
    at::Tensor m = at::arange(64 * 64, at::kFloat).view({64, 64}).sin() * (r + 1);
    at::Tensor flat = m.flatten().clone();
    waitOn(g.compressedAllreduce(flat, codec, 0, {{0, 64 * 64, {64, 64}, "m"}}));
    EXPECT_TRUE(at::allclose(flat, (m.flatten() / (r + 1)) * 1.5, 1e-4, 1e-4));
    // Its state is named by parameter, and loads back: the next step the
    // same as without the round trip (a second group's codec, loaded).
    CodecRegistry::NamedState state;
    g.runOnCommThread([&] { state = g.codecs().state(codec); });
    ASSERT_FALSE(state.empty());
    for (const auto& [key, value] : state) {
      EXPECT_TRUE(key == "powersgd/steps" || key == "powersgd/q/m") << key;
    }
    const int again = g.codecs().add(psgd);
    g.runOnCommThread([&] { g.codecs().loadState(again, state); });
    at::Tensor a = m.flatten().clone(), b = m.flatten().clone();
    waitOn(g.compressedAllreduce(a, codec, 0, {{0, 64 * 64, {64, 64}, "m"}}));
    waitOn(g.compressedAllreduce(b, again, 0, {{0, 64 * 64, {64, 64}, "m"}}));
    EXPECT_TRUE(at::equal(a, b));
  });
}

// A Work is done when the collective ran (finishRun, on the communication
// thread) and its future completed (completeFuture, later, on a completion
// thread). Between the two, is_completed() must say no — a script that
// polls it and then reads get_future().value() found no value there — and
// wait(timeout) must end at the timeout, not wait on for the future.
TEST(TorchBackend, AWorkIsCompletedOnlyWithItsFutureAndWaitKeepsItsTimeout) {
  auto work = c10::make_intrusive<BigbatchWork>(0, ::c10d::OpType::ALLREDUCE, "test",
                                                std::vector<at::Tensor>{at::ones({2})});
  EXPECT_FALSE(work->isCompleted());
  work->finishRun();
  EXPECT_FALSE(work->isCompleted()) << "completed before its future";
  EXPECT_FALSE(work->getFuture()->completed());
  // On a thread of its own, so that a wait that ignores its timeout fails
  // here instead of hanging the test.
  auto timedWait = std::async(std::launch::async, [&] {
    try {
      work->wait(std::chrono::milliseconds(50));
      return std::string("returned");
    } catch (const c10::Error& e) {
      return std::string(e.what_without_backtrace());
    }
  });
  const bool ended = timedWait.wait_for(std::chrono::seconds(60)) == std::future_status::ready;
  if (!ended) work->completeFuture();  // lets the waiting thread go before failing
  ASSERT_TRUE(ended) << "wait(50 ms) waited on for the future past its timeout";
  EXPECT_NE(timedWait.get().find("timed out"), std::string::npos);

  work->completeFuture();
  EXPECT_TRUE(work->isCompleted());
  EXPECT_TRUE(work->wait(std::chrono::milliseconds(50)));
  EXPECT_TRUE(at::equal(work->getFuture()->value().toTensorVector()[0], at::ones({2})));
}

// A script may drop its last reference to the group inside a callback of
// one of the group's futures: the destructor then runs on the completion
// thread running that callback, and must neither join that thread nor wait
// for that callback to end. Rank 0 adds its callback before rank 1 issues
// its half of the collective, so the future completes on a completion
// thread, never inline.
TEST(TorchBackend, AGroupReleasedInsideItsOwnCallbackEnds) {
  const int before = ProcessGroupBigbatch::liveGroups();
  auto comms = makeInProcessGroup(2);
  std::promise<void> added;
  std::shared_future<void> callbackAdded = added.get_future().share();
  // Shared with the callback, which may still be inside set_value() when
  // the test reads it.
  auto released = std::make_shared<std::promise<std::thread::id>>();
  std::future<std::thread::id> releasedOn = released->get_future();
  std::thread::id rank0Thread;
  std::vector<std::exception_ptr> errors(2);
  BackendOptions o;
  o.timeout = std::chrono::seconds(10);
  o.heartbeat = false;
  auto rank0 = [&] {
    try {
      setThreadErrorRank(0);
      rank0Thread = std::this_thread::get_id();
      auto group = std::make_shared<Group>(
          c10::make_intrusive<ProcessGroupBigbatch>(std::move(comms[0]), 0, 2, o));
      std::vector<at::Tensor> t = {at::ones({4})};
      auto work = (*group)->allreduce(t);
      work->getFuture()->addCallback([group, released](c10::ivalue::Future&) {
        group->reset();  // the last reference: the group ends here
        released->set_value(std::this_thread::get_id());
      });
      group.reset();  // only the callback holds it now
      added.set_value();
      work->wait();
      EXPECT_TRUE(at::equal(t[0], at::full({4}, 2.0)));
    } catch (...) {
      errors[0] = std::current_exception();
    }
  };
  auto rank1 = [&] {
    try {
      setThreadErrorRank(1);
      Group g = c10::make_intrusive<ProcessGroupBigbatch>(std::move(comms[1]), 1, 2, o);
      callbackAdded.wait();
      std::vector<at::Tensor> t = {at::ones({4})};
      g->allreduce(t)->wait();
      EXPECT_TRUE(at::equal(t[0], at::full({4}, 2.0)));
    } catch (...) {
      errors[1] = std::current_exception();
    }
  };
  std::thread a(rank0), b(rank1);
  a.join();
  b.join();
  for (auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  ASSERT_EQ(releasedOn.wait_for(std::chrono::seconds(60)), std::future_status::ready)
      << "the group's destructor did not return inside its own callback";
  EXPECT_NE(releasedOn.get(), rank0Thread) << "the callback ran inline, not on a completion thread";
  EXPECT_EQ(ProcessGroupBigbatch::liveGroups(), before);
}

}  // namespace
}  // namespace bigbatch::torch_backend

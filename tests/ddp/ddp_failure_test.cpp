// The DDP engine when a rank fails, in-process: the communication thread
// runs the work queued after an error without rethrowing it, and a failing
// rank's notice is sent from the communication thread, never beside an
// exchange in flight (MPI_THREAD_SERIALIZED).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "ddp_test_support.h"

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

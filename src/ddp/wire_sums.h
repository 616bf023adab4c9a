// The two collectives a gradient codec's buckets go through (WireSum,
// gradient_codec.h): the allreduce — every rank ends with the whole sum —
// and, under a partitioned optimizer (ZeRO-1), the reduce-scatter — rank c
// ends with the sum of chunk c only (collectives.h's chunking), the first
// half of a ring allreduce: S·(n-1)/n bytes sent per rank instead of twice
// that.
//
// Threading: on the thread that holds the communicator. Internal to src/ddp.
#pragma once

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"
#include "gradient_codec.h"

namespace bigbatch::ddp_detail {

class AllreduceWire : public WireSum {
 public:
  // `algorithm`: the configured allreduce (comm.allreduce), possibly tuned online.
  AllreduceWire(Communicator& comm, Allreduce& algorithm) : comm_(comm), algorithm_(algorithm) {}
  void sum(void* data, size_t count, DataType type) override {
    algorithm_.run(comm_, data, count, type);
  }
  void sumStaged(void* data, size_t count, DataType type, AllreduceStages& stages) override {
    algorithm_.run(comm_, data, count, type, stages);
  }
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "the gradient allreduce"; }

 private:
  Communicator& comm_;
  Allreduce& algorithm_;
};

class ReduceScatterWire : public WireSum {
 public:
  explicit ReduceScatterWire(Communicator& comm) : comm_(comm) {}
  void sum(void* data, size_t count, DataType type) override;
  std::pair<size_t, size_t> kept(size_t count) const override;
  const char* operation() const override { return "the gradient reduce-scatter"; }

 private:
  Communicator& comm_;
};

}  // namespace bigbatch::ddp_detail

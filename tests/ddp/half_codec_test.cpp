// The 16-bit wire (src/ddp/half_codec.h) packs and unpacks inside the
// collective (AllreduceStages): piece by piece where the hierarchical
// allreduce runs pipelined across hosts (counted through a wrapping wire:
// one staged call, a fill and a drain per piece). The result must be the
// same bits as packing the whole bucket, summing it, and unpacking it — on 4
// in-process ranks, 2 a host, in pieces of 256 bytes; for the sum and the
// mean; and under the reduce-scatter (ZeRO-1), only this rank's chunk
// unpacked, the rest of the bucket left as it was.
#include "half_codec.h"

#include <gtest/gtest.h>

#include <cstring>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/collectives/collectives.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "wire_sums.h"

namespace bigbatch {
namespace {

using ddp_detail::BucketResult;
using ddp_detail::HalfCodec;

// Forwards to the wire it wraps, counting the codec's staged calls and the
// pieces the collective filled: the codec must hand its packing to the
// collective (not pack, sum, unpack around it).
class CountingWire : public ddp_detail::WireSum {
 public:
  explicit CountingWire(ddp_detail::WireSum& inner) : inner_(inner) {}
  void sum(void* data, size_t count, DataType type) override {
    ++plainCalls;
    inner_.sum(data, count, type);
  }
  void sumStaged(void* data, size_t count, DataType type, AllreduceStages& stages) override {
    struct Counting : AllreduceStages {
      Counting(AllreduceStages& inner, int& fills, int& drains)
          : inner(inner), fills(fills), drains(drains) {}
      void fill(size_t b, size_t e) override {
        ++fills;
        inner.fill(b, e);
      }
      void drain(size_t b, size_t e) override {
        ++drains;
        inner.drain(b, e);
      }
      AllreduceStages& inner;
      int &fills, &drains;
    } counting(stages, fills, drains);
    ++stagedCalls;
    inner_.sumStaged(data, count, type, counting);
  }
  std::pair<size_t, size_t> kept(size_t count) const override { return inner_.kept(count); }
  const char* operation() const override { return inner_.operation(); }
  int plainCalls = 0, stagedCalls = 0, fills = 0, drains = 0;

 private:
  ddp_detail::WireSum& inner_;
};

std::vector<float> gradients(int rank, size_t count) {
  std::vector<float> g(count);
  for (size_t i = 0; i < count; ++i) {
    // Values that round differently in fp16 after the 1/n scale.
    g[i] =
        static_cast<float>((static_cast<int>(i * 7919 + rank * 104729) % 20011) - 10005) / 997.0f;
  }
  return g;
}

TEST(HalfCodec, StagedInPiecesGivesTheBitsOfPackSumUnpack) {
  constexpr int kRanks = 4;
  constexpr size_t kCount = 5003;
  AllreduceOptions o;
  o.shmChunkBytes = 512;
  o.pipelineBytes = 256;  // 39 pieces of 5003 fp16 values
  for (DataType wireType : {DataType::kFloat16, DataType::kBFloat16}) {
    for (BucketResult result : {BucketResult::kSum, BucketResult::kMean}) {
      for (bool reduceScatter : {false, true}) {
        auto algorithm = makeAllreduce("hierarchical", o);
        std::mutex m;
        std::vector<std::string> failures;
        runInProcess(
            kRanks,
            [&](Communicator& comm) {
              Bucket bucket;
              bucket.entries = {{0, 0, static_cast<int64_t>(kCount)}};
              bucket.numel = static_cast<int64_t>(kCount);
              const std::vector<float> input = gradients(comm.rank(), kCount);

              std::vector<float> staged = input;
              HalfCodec codec(wireType, kRanks, result);
              ddp_detail::AllreduceWire allreduce(comm, *algorithm);
              ddp_detail::ReduceScatterWire scatter(comm);
              ddp_detail::WireSum& wire =
                  reduceScatter ? static_cast<ddp_detail::WireSum&>(scatter) : allreduce;
              CountingWire counting(wire);
              codec.exchange(0, bucket, staged.data(), counting);
              // Through the allreduce, the pipeline's 39 pieces, each filled and
              // drained; the reduce-scatter fills all and drains its chunk.
              const int fillsExpected = reduceScatter ? 1 : 39;

              // The reference: the whole bucket packed, summed, unpacked.
              std::vector<float> reference = input;
              std::vector<uint8_t> bytes(kCount * elementSize(wireType));
              packFloats(wireType, bytes.data(), reference.data(), kCount, 1.0f / kRanks);
              wire.sum(bytes.data(), kCount, wireType);
              const auto [lo, hi] = wire.kept(kCount);
              unpackFloats(wireType, reference.data() + lo,
                           bytes.data() + lo * elementSize(wireType), hi - lo,
                           result == BucketResult::kMean ? 1.0f : float{kRanks});

              size_t wrong = 0, first = kCount;
              for (size_t i = 0; i < kCount; ++i) {
                if (std::memcmp(&staged[i], &reference[i], sizeof(float)) != 0) {
                  if (!wrong++) first = i;
                }
              }
              // Under the reduce-scatter the rest of the bucket is untouched.
              size_t kept = hi - lo;
              if (wrong || (reduceScatter && (kept == 0 || kept == kCount)) ||
                  counting.plainCalls != 0 || counting.stagedCalls != 1 ||
                  counting.fills != fillsExpected || counting.drains != fillsExpected) {
                std::lock_guard<std::mutex> lock(m);
                failures.push_back("rank " + std::to_string(comm.rank()) + ": " +
                                   std::to_string(wrong) + " differ, first at " +
                                   std::to_string(first) + ", kept " + std::to_string(kept) +
                                   "; sum " + std::to_string(counting.plainCalls) + ", staged " +
                                   std::to_string(counting.stagedCalls) + " with " +
                                   std::to_string(counting.fills) + " fills and " +
                                   std::to_string(counting.drains) + " drains, " +
                                   std::to_string(fillsExpected) + " expected");
              }
            },
            /*ranksPerHost=*/2);
        EXPECT_TRUE(failures.empty())
            << dataTypeName(wireType) << (result == BucketResult::kMean ? " mean" : " sum")
            << (reduceScatter ? " reduce-scatter" : " allreduce") << ": " << failures.front();
      }
    }
  }
}

}  // namespace
}  // namespace bigbatch

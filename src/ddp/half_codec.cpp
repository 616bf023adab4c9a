#include "half_codec.h"

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch::ddp_detail {

HalfCodec::HalfCodec(DataType wireType, int worldSize, BucketResult result)
    : type_(wireType), worldSize_(worldSize), result_(result) {}

void HalfCodec::exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) {
  const auto count = static_cast<size_t>(bucket.numel);
  if (wire_.size() <= index) wire_.resize(index + 1);
  std::vector<uint8_t>& bytes = wire_[index];
  bytes.resize(count * elementSize(type_));
  // Packed and unpacked piece by piece inside the collective: where it runs
  // in pieces (the pipelined hierarchical allreduce) the two passes over the
  // bucket run while other pieces are on the wire, instead of before the
  // first byte moves and after the last (docs/BENCHMARKS.md, "Horovod as the
  // peer"). Only the range this rank holds the sum of is drained. On an
  // error the bucket may hold sums in some pieces and gradients in the
  // rest; the step fails either way (the trainer ends the attempt, DDP's
  // hook future raises).
  struct Stages : AllreduceStages {
    Stages(DataType type, uint8_t* wire, float* data, float packScale, float unpackScale)
        : type(type),
          wire(wire),
          data(data),
          width(elementSize(type)),
          packScale(packScale),
          unpackScale(unpackScale) {}
    void fill(size_t begin, size_t end) override {
      packFloats(type, wire + begin * width, data + begin, end - begin, packScale);
    }
    void drain(size_t begin, size_t end) override {
      unpackFloats(type, data + begin, wire + begin * width, end - begin, unpackScale);
    }
    DataType type;
    uint8_t* wire;
    float* data;
    size_t width;
    float packScale, unpackScale;
  } stages(type_, bytes.data(), data, 1.0f / static_cast<float>(worldSize_),
           result_ == BucketResult::kMean ? 1.0f : static_cast<float>(worldSize_));
  wire.sumStaged(bytes.data(), count, type_, stages);
}

}  // namespace bigbatch::ddp_detail

// HalfCodec: gradients on the wire in 16 bits (fp16 or bf16), half the
// bytes of fp32 (Micikevicius et al. 2018; the 2048-GPU ImageNet records
// sent fp16).
//
// Each bucket is multiplied by 1/n (n ranks) while it is packed, so the sum
// of n values cannot overflow fp16 however many ranks add up; the summed
// 16-bit values are multiplied back by n while they are unpacked into the
// fp32 bucket (or, where the codec leaves the mean, not multiplied back:
// the pre-divided sum is the mean). The collective adds 16-bit values, and
// how often it rounds depends on the algorithm: the pairwise ones (ring,
// recursive doubling, halving-doubling) round to 16 bits at every
// addition; the shared-memory reduction of many ranks' slices
// (sum_into.cpp) accumulates in fp32 and rounds once. Either way every
// rank ends with the same bits: each chunk's sum is computed once and
// copied, or in the same order on every rank. Packing and unpacking run
// inside the collective, piece by piece where it is pipelined
// (AllreduceStages, collectives/allreduce.h).
//
// Threading: as GradientCodec. Internal to src/ddp.
#pragma once

#include <cstdint>
#include <vector>

#include "gradient_codec.h"

namespace bigbatch::ddp_detail {

class HalfCodec : public GradientCodec {
 public:
  HalfCodec(DataType wireType, int worldSize, BucketResult result = BucketResult::kSum);
  DataType wireType() const override { return type_; }
  void exchange(size_t index, const Bucket& bucket, float* data, WireSum& wire) override;

 private:
  DataType type_;
  int worldSize_;
  BucketResult result_;
  std::vector<std::vector<uint8_t>> wire_;  // per bucket: its 16-bit copy
};

}  // namespace bigbatch::ddp_detail

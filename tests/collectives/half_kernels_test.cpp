// The collectives' fp16 conversions and sums (src/collectives/half_kernels.h,
// F16C where the processor has it) against c10::Half's scalar code, bit for
// bit for every non-NaN value: every sign and exponent, with mantissas at
// and around each rounding tie, and every fp16 bit pattern back. Counts
// that are not a multiple of 8 run the scalar tail too.
#include <c10/util/Half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "bigbatch/collectives/allreduce.h"

namespace bigbatch {
namespace {

float fromBits(uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint32_t bitsOf(float f) {
  uint32_t bits;
  std::memcpy(&bits, &f, 4);
  return bits;
}

bool halfIsNan(uint16_t h) { return (h & 0x7C00) == 0x7C00 && (h & 0x03FF) != 0; }

// Equal bits, or both NaN (a NaN's payload is not promised).
bool sameHalf(uint16_t got, uint16_t want) {
  return halfIsNan(want) ? halfIsNan(got) : got == want;
}

// Every sign, exponent and top-10 mantissa, with the low 13 bits (what
// fp16 rounds away) below, at and above the tie.
std::vector<float> everyRoundingCase() {
  std::vector<float> out;
  for (uint32_t sign = 0; sign < 2; ++sign) {
    for (uint32_t exponent = 0; exponent < 256; ++exponent) {
      for (uint32_t top = 0; top < 1024; ++top) {
        for (uint32_t low : {0x0u, 0x1u, 0xFFFu, 0x1000u, 0x1001u, 0x1FFFu}) {
          out.push_back(fromBits(sign << 31 | exponent << 23 | top << 13 | low));
        }
      }
    }
  }
  out.resize(out.size() - 5);  // a tail the vector loop leaves
  return out;
}

TEST(HalfKernels, PackRoundsEveryValueAsCHalf) {
  const std::vector<float> in = everyRoundingCase();
  std::vector<uint16_t> out(in.size());
  for (float scale : {1.0f, 0.5f}) {
    packFloats(DataType::kFloat16, out.data(), in.data(), in.size(), scale);
    size_t wrong = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      const uint16_t want = c10::Half(in[i] * scale).x;
      if (!sameHalf(out[i], want) && wrong++ < 5) {
        ADD_FAILURE() << "scale " << scale << ": 0x" << std::hex << bitsOf(in[i]) << " packed to 0x"
                      << out[i] << ", c10::Half gives 0x" << want;
      }
    }
    EXPECT_EQ(wrong, 0u) << "scale " << scale;
  }
}

TEST(HalfKernels, UnpackGivesEveryHalfsValue) {
  std::vector<uint16_t> in(65536 + 5);
  for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<uint16_t>(i);
  std::vector<float> out(in.size());
  for (float scale : {1.0f, 3.0f}) {
    unpackFloats(DataType::kFloat16, out.data(), in.data(), in.size(), scale);
    for (size_t i = 0; i < in.size(); ++i) {
      const float want = static_cast<float>(c10::Half(in[i], c10::Half::from_bits())) * scale;
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i])) << "0x" << std::hex << in[i];
      } else {
        ASSERT_EQ(bitsOf(out[i]), bitsOf(want)) << "0x" << std::hex << in[i] << " scale " << scale;
      }
    }
  }
}

TEST(HalfKernels, SumsRoundOnceAsCHalf) {
  std::mt19937 gen(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const size_t n = 10'003;
  std::vector<std::vector<uint16_t>> srcs(3, std::vector<uint16_t>(n));
  for (auto& s : srcs) {
    for (size_t i = 0; i < n; ++i) {
      // Some near fp16's largest value, so that sums overflow to infinity.
      const float scale = i % 97 == 0 ? 40000.0f : 1.0f;
      s[i] = c10::Half(normal(gen) * scale).x;
    }
  }
  const auto value = [](uint16_t h) {
    return static_cast<float>(c10::Half(h, c10::Half::from_bits()));
  };

  std::vector<uint16_t> into = srcs[0];
  sumInto(DataType::kFloat16, into.data(), srcs[1].data(), n);
  for (size_t i = 0; i < n; ++i) {
    ASSERT_TRUE(sameHalf(into[i], c10::Half(value(srcs[0][i]) + value(srcs[1][i])).x)) << i;
  }

  std::vector<uint16_t> many(n);
  const void* ptrs[3] = {srcs[0].data(), srcs[1].data(), srcs[2].data()};
  sumMany(DataType::kFloat16, many.data(), ptrs, 3, n);
  for (size_t i = 0; i < n; ++i) {
    const float acc = (value(srcs[0][i]) + value(srcs[1][i])) + value(srcs[2][i]);
    ASSERT_TRUE(sameHalf(many[i], c10::Half(acc).x)) << i;
  }
}

}  // namespace
}  // namespace bigbatch

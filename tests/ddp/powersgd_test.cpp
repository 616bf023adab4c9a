// PowerSGD (src/ddp/powersgd_codec.h): the codec alone on one rank against
// the algorithm written out with torch ops, and through the DDP engine on
// 2 and 3 in-process ranks — full rank reconstructs the sum, vectors and
// small matrices pass bit-exactly, every rank ends with the same
// gradients, the start step, and the refusals.
#include <gtest/gtest.h>

#include <limits>
#include <utility>

#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "bigbatch/ddp/distributed_data_parallel.h"
#include "gradient_codec.h"
#include "powersgd_codec.h"

namespace bigbatch {
namespace {

using ddp_detail::PowerSgdCodec;
using ddp_detail::WireSum;

// One rank: the sum is the value itself.
class OneRankWire : public WireSum {
 public:
  void sum(void*, size_t, DataType) override { ++calls; }
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "test"; }
  int calls = 0;
};

// M projected on the column span of M Q: what one power iteration keeps.
torch::Tensor projected(const torch::Tensor& M, const torch::Tensor& Q) {
  const auto qr = torch::linalg_qr(torch::mm(M, Q.to(torch::kDouble)));
  const torch::Tensor P = std::get<0>(qr);
  return torch::mm(P, torch::mm(P.t(), M));
}

// A bucket holding one parameter of `numel` values: the codec alone.
Bucket oneMatrix(int64_t numel) {
  Bucket bucket;
  bucket.entries = {{0, 0, numel}};
  bucket.numel = numel;
  return bucket;
}

torch::Tensor stateOf(const PowerSgdCodec& codec, const std::string& key) {
  for (const auto& [name, value] : codec.state()) {
    if (name == key) return value;
  }
  return {};
}

// A hand-checked two-step example: each step's output is its input (with
// the last step's error added) projected on the span of that input times
// Q; the error kept is what the output left out, exactly; and over the two
// steps output + error adds up to the two gradients.
TEST(PowerSgd, ErrorFeedbackCarriesWhatCompressionLeftOut) {
  const torch::Tensor weight = torch::zeros({6, 5});
  PowerSgdOptions o;
  o.rank = 1;
  PowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1);
  ASSERT_EQ(codec.rankOf(0), 1);
  const Bucket bucket = oneMatrix(30);
  torch::manual_seed(3);
  const torch::Tensor g1 = torch::randn({6, 5}), g2 = torch::randn({6, 5});
  OneRankWire wire;

  const torch::Tensor q0 = stateOf(codec, "powersgd/q/w").clone();
  torch::Tensor out1 = g1.clone();
  codec.exchange(0, bucket, out1.data_ptr<float>(), wire);
  EXPECT_EQ(wire.calls, 2);  // P, then Q: no uncompressed tensor to sum
  EXPECT_TRUE(
      torch::allclose(out1.to(torch::kDouble), projected(g1.to(torch::kDouble), q0), 1e-5, 1e-5));
  const torch::Tensor e1 = stateOf(codec, "powersgd/error/w");
  EXPECT_TRUE(torch::equal(e1, g1 - out1));       // carried exactly
  EXPECT_GT(e1.abs().max().item<float>(), 1e-3);  // rank 1 of a 6x5 matrix leaves something out

  const torch::Tensor q1 = stateOf(codec, "powersgd/q/w").clone();  // warm start
  torch::Tensor out2 = g2.clone();
  codec.exchange(0, bucket, out2.data_ptr<float>(), wire);
  const torch::Tensor in2 = (g2 + e1).to(torch::kDouble);
  EXPECT_TRUE(torch::allclose(out2.to(torch::kDouble), projected(in2, q1), 1e-5, 1e-5));
  const torch::Tensor e2 = stateOf(codec, "powersgd/error/w");
  EXPECT_TRUE(torch::allclose(out1 + out2 + e2, g1 + g2, 1e-5, 1e-5));
  EXPECT_EQ(codec.steps(), 2);
}

// The loss scale changes between steps (x2 on growth, / 2 on an
// overflow): with the error memory rescaled with it (rescale), a run on
// gradients scaled by s is exactly the unscaled run times s — powers of two
// scale every product, norm and division exactly — while without it the
// memory of the last step enters at the wrong scale.
TEST(PowerSgd, ErrorMemoryFollowsTheLossScale) {
  const torch::Tensor weight = torch::zeros({6, 5});
  PowerSgdOptions o;
  o.rank = 1;
  const Bucket bucket = oneMatrix(30);
  torch::manual_seed(5);
  const torch::Tensor g1 = torch::randn({6, 5}), g2 = torch::randn({6, 5});
  OneRankWire wire;
  auto twoSteps = [&](double s1, double s2, bool rescale) {
    PowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1);
    torch::Tensor a = g1 * s1, b = g2 * s2;
    codec.exchange(0, bucket, a.data_ptr<float>(), wire);
    if (rescale) codec.rescale(s2 / s1);
    codec.exchange(0, bucket, b.data_ptr<float>(), wire);
    return std::make_pair(a, b);
  };
  const auto [a1, a2] = twoSteps(1, 1, true);
  const auto [b1, b2] = twoSteps(4, 8, true);  // the scale grew between the steps
  EXPECT_TRUE(torch::equal(b1, a1 * 4));
  EXPECT_TRUE(torch::equal(b2, a2 * 8));
  const auto [c1, c2] = twoSteps(8, 4, true);  // and backed off
  EXPECT_TRUE(torch::equal(c2, a2 * 4));
  const auto [d1, d2] = twoSteps(4, 8, false);  // not rescaled: another step
  EXPECT_GT((d2 - a2 * 8).abs().max().item<float>(), 1e-3 * (a2 * 8).abs().max().item<float>());
}

// Without error feedback nothing is kept; without warm start Q is drawn
// afresh each step (the same on every rank: from a seed of the step).
TEST(PowerSgd, AblationsKeepNoErrorAndDrawQAfresh) {
  const torch::Tensor weight = torch::zeros({8, 8});
  PowerSgdOptions o;
  o.rank = 2;
  o.errorFeedback = false;
  o.warmStart = false;
  PowerSgdCodec a(o, DataType::kFloat32, {weight}, {"w"}, 1),
      b(o, DataType::kFloat32, {weight}, {"w"}, 1);
  const Bucket bucket = oneMatrix(64);
  OneRankWire wire;
  torch::manual_seed(5);
  const torch::Tensor g = torch::randn({8, 8});
  torch::Tensor x = g.clone(), y = g.clone();
  a.exchange(0, bucket, x.data_ptr<float>(), wire);
  b.exchange(0, bucket, y.data_ptr<float>(), wire);
  EXPECT_TRUE(torch::equal(x, y));  // two "ranks", the same Q
  EXPECT_FALSE(stateOf(a, "powersgd/error/w").defined());
  torch::Tensor x2 = g.clone();
  a.exchange(0, bucket, x2.data_ptr<float>(), wire);
  EXPECT_FALSE(torch::equal(x, x2));  // step 2 drew another Q
}

// A zero gradient (a layer no loss has reached yet) sends back a zero Q;
// the next step draws Q afresh instead of multiplying by zero for good.
TEST(PowerSgd, AZeroGradientStepDoesNotStopCompression) {
  const torch::Tensor weight = torch::zeros({6, 5});
  PowerSgdOptions o;
  o.rank = 1;
  PowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1);
  const Bucket bucket = oneMatrix(30);
  OneRankWire wire;
  torch::Tensor zero = torch::zeros({6, 5});
  codec.exchange(0, bucket, zero.data_ptr<float>(), wire);
  EXPECT_TRUE(torch::equal(zero, torch::zeros({6, 5})));
  torch::manual_seed(7);
  const torch::Tensor g = torch::randn({6, 5});
  torch::Tensor out = g.clone();
  codec.exchange(0, bucket, out.data_ptr<float>(), wire);
  EXPECT_GT(out.abs().max().item<float>(), 0.1f * g.abs().max().item<float>());
  EXPECT_TRUE(torch::equal(stateOf(codec, "powersgd/error/w"), g - out));
}

// An overflowed step (inf in one gradient) comes out NaN for the loss
// scaler to skip; the error memory is reset rather than carrying inf into
// every later step, Q stays finite, and the next finite step is finite.
TEST(PowerSgd, ANonFiniteStepIsPassedOnAndNotRemembered) {
  const torch::Tensor weight = torch::zeros({8, 10});
  PowerSgdOptions o;
  o.rank = 2;
  PowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1);
  const Bucket bucket = oneMatrix(80);
  OneRankWire wire;
  torch::manual_seed(9);
  torch::Tensor g1 = torch::randn({8, 10}), g2 = torch::randn({8, 10}), g3 = torch::randn({8, 10});
  codec.exchange(0, bucket, g1.data_ptr<float>(), wire);
  ASSERT_GT(stateOf(codec, "powersgd/error/w").abs().max().item<float>(), 1e-3);
  g2[2][3] = std::numeric_limits<float>::infinity();
  codec.exchange(0, bucket, g2.data_ptr<float>(), wire);
  EXPECT_TRUE(g2.isnan().all().item<bool>());
  EXPECT_TRUE(torch::equal(stateOf(codec, "powersgd/error/w"), torch::zeros({8, 10})));
  EXPECT_TRUE(stateOf(codec, "powersgd/q/w").isfinite().all().item<bool>());
  const torch::Tensor in3 = g3.clone();
  codec.exchange(0, bucket, g3.data_ptr<float>(), wire);
  EXPECT_TRUE(g3.isfinite().all().item<bool>());
  EXPECT_TRUE(torch::equal(stateOf(codec, "powersgd/error/w"), in3 - g3));  // nothing old added
}

// The state a checkpoint carries restores the codec to the same bits.
TEST(PowerSgd, StateRestoresTheSameNextStep) {
  const torch::Tensor weight = torch::zeros({8, 10});
  PowerSgdOptions o;
  o.rank = 2;
  PowerSgdCodec a(o, DataType::kFloat32, {weight}, {"w"}, 1);
  const Bucket bucket = oneMatrix(80);
  OneRankWire wire;
  torch::manual_seed(11);
  const torch::Tensor g1 = torch::randn({8, 10}), g2 = torch::randn({8, 10});
  torch::Tensor x = g1.clone();
  a.exchange(0, bucket, x.data_ptr<float>(), wire);
  PowerSgdCodec b(o, DataType::kFloat32, {weight}, {"w"}, 1);
  b.loadState(a.state());
  torch::Tensor ya = g2.clone(), yb = g2.clone();
  a.exchange(0, bucket, ya.data_ptr<float>(), wire);
  b.exchange(0, bucket, yb.data_ptr<float>(), wire);
  EXPECT_TRUE(torch::equal(ya, yb));
  EXPECT_EQ(b.steps(), 2);
  // Another rank's state for this shape is refused by name.
  PowerSgdOptions wider = o;
  wider.rank = 1;
  PowerSgdCodec c(wider, DataType::kFloat32, {weight}, {"w"}, 1);
  EXPECT_THROW(c.loadState(a.state()), InvalidArgument);
}

TEST(PowerSgd, RefusesARankThatCompressesNothing) {
  const torch::Tensor weight = torch::zeros({6, 5}), bias = torch::zeros({6});
  PowerSgdOptions o;
  o.rank = 0;
  EXPECT_THROW(PowerSgdCodec(o, DataType::kFloat32, {weight, bias}, {"w", "b"}, 2),
               InvalidArgument);
  o.rank = 2;  // (6 + 5) x 2 x 2 = 44 > 30: not half the size
  try {
    PowerSgdCodec(o, DataType::kFloat32, {weight, bias}, {"w", "b"}, 2);
    FAIL() << "rank 2 compresses nothing here";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("ddp.powersgd_rank = 2"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("largest rank that compresses one is 1"),
              std::string::npos)
        << e.what();
  }
}

struct Wide : torch::nn::Module {
  Wide() {
    big = register_module("big", torch::nn::Linear(40, 32));     // 32 x 40: compressed
    small = register_module("small", torch::nn::Linear(32, 3));  // 3 x 32: not at rank 2
  }
  torch::Tensor forward(torch::Tensor x) { return small(torch::tanh(big(x))); }
  torch::nn::Linear big{nullptr}, small{nullptr};
};

// 48 images per rank: big.weight's gradient has full rank.
torch::Tensor inputOf(int rank, int step) {
  return torch::arange(48 * 40, torch::kFloat32)
      .reshape({48, 40})
      .mul(0.37 + 0.11 * rank + 0.05 * step)
      .sin();
}

// `steps` synced steps of Wide on `n` in-process ranks under `o`; per rank
// and step, every parameter's gradient.
std::vector<std::vector<std::vector<torch::Tensor>>> gradientsOf(int n, const DdpOptions& o,
                                                                 int steps) {
  std::vector<std::shared_ptr<Wide>> nets;
  for (int r = 0; r < n; ++r) {
    torch::manual_seed(17);
    nets.push_back(std::make_shared<Wide>());
  }
  std::vector<std::vector<std::vector<torch::Tensor>>> out(n);
  runInProcess(n, [&](Communicator& comm) {
    const int r = comm.rank();
    JobCollectives job(comm);
    DistributedDataParallel ddp(*nets[r], job, o);
    for (int s = 0; s < steps; ++s) {
      ddp.zeroGrad();
      ddp.beginBackward(true);
      nets[r]->forward(inputOf(r, s)).pow(2).sum().backward();
      ddp.finishBackward();
      std::vector<torch::Tensor> grads;
      for (const auto& p : nets[r]->parameters()) grads.push_back(p.grad().clone());
      out[r].push_back(grads);
    }
  });
  return out;
}

DdpOptions powerSgd(int rank) {
  DdpOptions o;
  o.compression = GradientCompression::kPowerSgd;
  o.powerSgd.rank = rank;
  o.fusionBytes = 1 << 20;
  return o;
}

// Parameters registered big.weight, big.bias, small.weight, small.bias.
// The uncompressed ones are summed in one buffer of their own: on 2 ranks
// a + b is the same bits in any order, so they equal the fp32 exchange's
// exactly; on 3 the collective adds that shorter buffer in other chunks
// than the whole bucket, so they agree to float rounding.
TEST(PowerSgd, SmallTensorsPassUncompressedAndEveryRankAgrees) {
  for (int n : {2, 3}) {
    const auto plain = gradientsOf(n, DdpOptions{}, 3);
    const auto packed = gradientsOf(n, powerSgd(2), 3);
    for (int s = 0; s < 3; ++s) {
      for (size_t p : {1u, 2u, 3u}) {  // bias vectors and the 3 x 32 matrix
        const torch::Tensor want = plain[0][s][p], got = packed[0][s][p];
        if (n == 2) {
          EXPECT_TRUE(torch::equal(got, want)) << n << " ranks, param " << p;
        } else {
          EXPECT_TRUE(torch::allclose(got, want, 1e-6, 1e-6 * want.abs().max().item<float>()))
              << n << " ranks, param " << p;
        }
      }
      EXPECT_FALSE(torch::equal(packed[0][s][0], plain[0][s][0]));  // big.weight compressed
      for (int r = 1; r < n; ++r) {
        for (size_t p = 0; p < 4; ++p) {
          EXPECT_TRUE(torch::equal(packed[r][s][p], packed[0][s][p]))
              << n << " ranks: rank " << r << " differs at step " << s << ", param " << p;
        }
      }
    }
  }
}

// At the full rank of a matrix, P spans its columns: the sum comes back to
// float rounding (compression forced with minCompressionRate = 0).
TEST(PowerSgd, FullRankReconstructsTheSum) {
  DdpOptions o = powerSgd(32);
  o.powerSgd.minCompressionRate = 0;
  o.powerSgd.errorFeedback = false;
  const auto plain = gradientsOf(2, DdpOptions{}, 2);
  const auto packed = gradientsOf(2, o, 2);
  for (int s = 0; s < 2; ++s) {
    for (size_t p = 0; p < 4; ++p) {
      const torch::Tensor want = plain[0][s][p], got = packed[0][s][p];
      EXPECT_TRUE(torch::allclose(got, want, 1e-4, 1e-4 * want.abs().max().item<float>()))
          << "step " << s << ", param " << p << ": max difference "
          << (got - want).abs().max().item<float>();
    }
  }
}

// ddp.powersgd_start_step: the steps before it are exchanged exactly.
TEST(PowerSgd, StepsBeforeTheStartAreUncompressed) {
  DdpOptions o = powerSgd(2);
  o.powerSgd.startStep = 2;
  const auto plain = gradientsOf(2, DdpOptions{}, 3);
  const auto packed = gradientsOf(2, o, 3);
  for (int s = 0; s < 2; ++s) EXPECT_TRUE(torch::equal(packed[0][s][0], plain[0][s][0])) << s;
  EXPECT_FALSE(torch::equal(packed[0][2][0], plain[0][2][0]));
}

TEST(PowerSgd, ReportsTheBytesOnTheWire) {
  std::vector<std::shared_ptr<Wide>> nets = {std::make_shared<Wide>(), std::make_shared<Wide>()};
  std::vector<int64_t> wire(2), fp32(2);
  runInProcess(2, [&](Communicator& comm) {
    JobCollectives job(comm);
    DistributedDataParallel ddp(*nets[comm.rank()], job, powerSgd(2));
    wire[comm.rank()] = ddp.wireBytesPerStep();
    fp32[comm.rank()] = ddp.fp32BytesPerStep();
  });
  // big.weight as (32 + 40) x 2 factors; the rest as it is.
  EXPECT_EQ(wire[0], ((32 + 40) * 2 + 32 + 3 * 32 + 3) * 4);
  // The fp32 bucket as laid out, each tensor at a multiple of 16 values
  // (bucket_layout.h): small.bias 0..3, small.weight 16..112, big.bias
  // 112..144, big.weight 144..1424.
  EXPECT_EQ(fp32[0], 1424 * 4);
}

// ddp.exchange_dtype = fp16 / bf16: factors and uncompressed values in 16
// bits. Every rank still ends with the same bits (2 and 3 ranks), the
// bytes halve, and the gradients stay near the fp32 factors' — within
// what 16-bit rounding of the factors and the small tensors allows: 4
// units in the last place of the type at the largest value (1.1 and 1.25
// were seen for fp16 and bf16, 2026-12-03).
TEST(PowerSgd, SixteenBitFactorsKeepEveryRankEqualNearFp32) {
  for (const auto& [type, ulp] :
       {std::pair{DataType::kFloat16, 1.0f / 1024}, std::pair{DataType::kBFloat16, 1.0f / 128}}) {
    for (int n : {2, 3}) {
      DdpOptions o = powerSgd(2);
      o.exchangeType = type;
      const auto fp32 = gradientsOf(n, powerSgd(2), 3);
      const auto half = gradientsOf(n, o, 3);
      const float tolerance = 4 * ulp;
      for (int s = 0; s < 3; ++s) {
        for (size_t p = 0; p < 4; ++p) {
          for (int r = 1; r < n; ++r) {
            EXPECT_TRUE(torch::equal(half[r][s][p], half[0][s][p]))
                << dataTypeName(type) << ", " << n << " ranks: rank " << r << " differs at step "
                << s << ", param " << p;
          }
          const torch::Tensor want = fp32[0][s][p], got = half[0][s][p];
          const float scale = want.abs().max().item<float>();
          const float off = (got - want).abs().max().item<float>();
          EXPECT_LE(off, tolerance * scale)
              << dataTypeName(type) << ", " << n << " ranks, step " << s << ", param " << p << ": "
              << off / scale << " of the largest value";
        }
      }
    }
  }
  std::vector<std::shared_ptr<Wide>> nets = {std::make_shared<Wide>(), std::make_shared<Wide>()};
  std::vector<int64_t> wire(2);
  DdpOptions o = powerSgd(2);
  o.exchangeType = DataType::kFloat16;
  runInProcess(2, [&](Communicator& comm) {
    JobCollectives job(comm);
    DistributedDataParallel ddp(*nets[comm.rank()], job, o);
    wire[comm.rank()] = ddp.wireBytesPerStep();
  });
  EXPECT_EQ(wire[0], ((32 + 40) * 2 + 32 + 3 * 32 + 3) * 2);
}

TEST(PowerSgd, RefusedWithThePartitionedOptimizer) {
  DdpOptions o = powerSgd(2);
  o.partition = true;
  EXPECT_THROW(gradientsOf(2, o, 1), InvalidArgument);
}

// N ranks holding the same values: the sum multiplies them by N, in the
// wire's own type (for 16 bits exact only when N is a power of two).
class EqualRanksWire : public WireSum {
 public:
  explicit EqualRanksWire(int n) : n_(n) {}
  void sum(void* data, size_t count, DataType type) override {
    ++calls;
    const auto dtype = type == DataType::kFloat32   ? torch::kFloat
                       : type == DataType::kFloat16 ? torch::kHalf
                                                    : torch::kBFloat16;
    torch::from_blob(data, {static_cast<int64_t>(count)}, dtype).mul_(n_);
  }
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "test"; }
  int calls = 0;

 private:
  int n_;
};

// A codec made to leave the mean (a DDP comm hook's result) leaves the
// bits of its sum divided by the world size — the division a separate pass
// made before — in every codec: fp32, the 16-bit wires, and PowerSGD's
// uncompressed steps, its uncompressed tensors (two segments: packed) and
// P Q^T; with the same collectives. On 3 ranks a multiplication by 1/3
// would differ from the division; the 16-bit wires run on 2 (their sum of
// 3 equal values rounds, so the sum times 3 over 3 is not the mean's bits).
TEST(BucketResult, TheMeanIsTheSumDividedByTheRanksInEveryCodec) {
  const std::vector<torch::Tensor> params = {torch::zeros({48, 40}), torch::zeros({48}),
                                             torch::zeros({40})};
  const std::vector<std::string> names = {"w", "b", "c"};
  Bucket bucket;
  bucket.entries = {{0, 0, 48 * 40}, {1, 48 * 40, 48}, {2, 48 * 41, 40}};
  bucket.numel = 48 * 41 + 40;
  struct Case {
    const char* name;
    DataType wire;
    bool powerSgd;
    int ranks;
  };
  std::vector<Case> cases;
  for (int n : {2, 3}) {
    cases.push_back({"fp32", DataType::kFloat32, false, n});
    cases.push_back({"powersgd", DataType::kFloat32, true, n});
  }
  cases.push_back({"fp16", DataType::kFloat16, false, 2});
  cases.push_back({"bf16", DataType::kBFloat16, false, 2});
  cases.push_back({"powersgd fp16", DataType::kFloat16, true, 2});
  cases.push_back({"powersgd bf16", DataType::kBFloat16, true, 2});
  for (const Case& c : cases) {
    DdpOptions o;
    o.exchangeType = c.wire;
    if (c.powerSgd) {
      o.compression = GradientCompression::kPowerSgd;
      o.powerSgd.rank = 2;
      o.powerSgd.startStep = 1;  // step 1 uncompressed, then compressed
    }
    auto sum =
        ddp_detail::makeGradientCodec(o, params, names, c.ranks, ddp_detail::BucketResult::kSum);
    auto mean =
        ddp_detail::makeGradientCodec(o, params, names, c.ranks, ddp_detail::BucketResult::kMean);
    EqualRanksWire sumWire(c.ranks), meanWire(c.ranks);
    for (int step = 1; step <= 3; ++step) {
      const std::string what = std::string(c.name) + " on " + std::to_string(c.ranks) +
                               " ranks, step " + std::to_string(step);
      torch::manual_seed(step);
      const torch::Tensor g = torch::randn({bucket.numel});
      torch::Tensor summed = g.clone(), averaged = g.clone();
      sum->exchange(0, bucket, summed.data_ptr<float>(), sumWire);
      mean->exchange(0, bucket, averaged.data_ptr<float>(), meanWire);
      EXPECT_TRUE(torch::equal(averaged, summed / c.ranks)) << what;
      EXPECT_FALSE(torch::equal(averaged, summed)) << what;
      if (c.powerSgd && step > 1) {  // compressed: not the gradient itself
        EXPECT_FALSE(torch::allclose(averaged.narrow(0, 0, 48 * 40), g.narrow(0, 0, 48 * 40)))
            << what;
      }
    }
    EXPECT_EQ(meanWire.calls, sumWire.calls) << c.name;
  }
}

}  // namespace
}  // namespace bigbatch

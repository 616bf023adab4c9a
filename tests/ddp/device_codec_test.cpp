// The NCCL path's device codecs (src/ddp/device_codec.h,
// device_powersgd_codec.h) run as ATen ops, so they run on CPU tensors
// too: here on 2 and 3 in-process ranks, their collective a host
// allreduce, against the host codecs on the same ranks and gradients. The
// cast codec leaves the host codecs' bits; PowerSGD agrees with the host
// codec to float rounding (other kernels, the same algorithm), passes the
// uncompressed tensors bit for bit, leaves every rank the same bits,
// reconstructs the sum at full rank, handles a non-finite and a zero step
// as the host codec does, and its state resumes on the host codec and back.
// On the GPU itself: tests/ddp/nccl_exchange_cuda_test.cpp.
#include <gtest/gtest.h>

#include <limits>
#include <memory>
#include <utility>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/in_process_communicator.h"
#include "bigbatch/common/error.h"
#include "device_codec.h"
#include "device_powersgd_codec.h"
#include "gradient_codec.h"
#include "powersgd_codec.h"
#include "wire_sums.h"

namespace bigbatch::ddp_detail {
namespace {

DataType typeOf(const torch::Tensor& t) {
  switch (t.scalar_type()) {
    case torch::kFloat16: return DataType::kFloat16;
    case torch::kBFloat16: return DataType::kBFloat16;
    default: return DataType::kFloat32;
  }
}

// The device codec's collective as a host ring allreduce (CPU tensors).
class HostRingWire : public DeviceWireSum {
 public:
  HostRingWire(Communicator& comm, Allreduce& ring) : comm_(comm), ring_(ring) {}
  void sum(const torch::Tensor& values) override {
    ASSERT_TRUE(values.is_contiguous());
    ++calls;
    ring_.run(comm_, values.data_ptr(), static_cast<size_t>(values.numel()), typeOf(values));
  }
  int calls = 0;

 private:
  Communicator& comm_;
  Allreduce& ring_;
};

// One rank: the sum is the value itself.
class OneRankDeviceWire : public DeviceWireSum {
 public:
  void sum(const torch::Tensor&) override {}
};

class OneRankWire : public WireSum {
 public:
  void sum(void*, size_t, DataType) override {}
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "test"; }
};

std::unique_ptr<Allreduce> ring() {
  AllreduceOptions o;
  o.checkSignature = false;
  return makeAllreduce("ring", o);
}

// big.weight 32 x 40 (compressed at rank 2), big.bias, small.weight 3 x 32
// (not: its factors would not pay), small.bias — one bucket, in that order.
struct Model {
  std::vector<torch::Tensor> params = {torch::zeros({32, 40}), torch::zeros({32}),
                                       torch::zeros({3, 32}), torch::zeros({3})};
  std::vector<std::string> names = {"big.weight", "big.bias", "small.weight", "small.bias"};
  Bucket bucket;
  Model() {
    for (size_t i = 0; i < params.size(); ++i) {
      bucket.entries.push_back({i, bucket.numel, params[i].numel()});
      bucket.numel += params[i].numel();
    }
  }
};

// Rank r's flat gradient at step s: a low-rank part (what PowerSGD keeps
// well) and noise, different on every rank and step — from a generator of
// its own (the ranks are threads: the global one would race).
torch::Tensor gradientOf(const Bucket& bucket, int rank, int step) {
  at::Generator gen = at::detail::createCPUGenerator(100 + 10 * rank + step);
  torch::Tensor g = torch::randn({bucket.numel}, gen) * 0.1;
  g.narrow(0, 0, 32 * 40)
      .view({32, 40})
      .add_(torch::mm(torch::randn({32, 2}, gen), torch::randn({2, 40}, gen)));
  return g;
}

struct Outputs {
  std::vector<std::vector<torch::Tensor>> host, device;  // [rank][step]: the bucket after
  std::vector<GradientCodec::NamedState> hostState, deviceState;
};

// `steps` steps of the host and the device PowerSGD codec side by side on
// `n` in-process ranks.
Outputs runBoth(int n, const PowerSgdOptions& o, DataType wireType, int steps) {
  const Model model;
  Outputs out;
  out.host.resize(n);
  out.device.resize(n);
  out.hostState.resize(n);
  out.deviceState.resize(n);
  runInProcess(n, [&](Communicator& comm) {
    const int r = comm.rank();
    auto algorithm = ring();
    AllreduceWire hostWire(comm, *algorithm);
    HostRingWire deviceWire(comm, *algorithm);
    PowerSgdCodec host(o, wireType, model.params, model.names, n);
    DevicePowerSgdCodec device(o, wireType, model.params, model.names, n, torch::kCPU);
    for (int s = 0; s < steps; ++s) {
      torch::Tensor a = gradientOf(model.bucket, r, s), b = a.clone();
      host.exchange(0, model.bucket, a.data_ptr<float>(), hostWire);
      device.exchange(0, model.bucket, b, deviceWire);
      out.host[r].push_back(a);
      out.device[r].push_back(b);
    }
    out.hostState[r] = host.state();
    out.deviceState[r] = device.state();
  });
  return out;
}

float largest(const torch::Tensor& t) { return t.abs().max().item<float>(); }

// The compressed big.weight to 1e-4 of its largest value in fp32, to 4
// units in the last place of fp16 in fp16 (the factors are rounded to 16
// bits: a value a hair from a rounding boundary on one side rounds the
// other way); seen 2026-12-04: at most 2.0e-6 of it in fp32, 1e-7 in
// fp16 — far below either, and a wrong step would be off by its whole
// size. The uncompressed tensors bit for bit; every rank the same bits.
TEST(DevicePowerSgd, MatchesTheHostCodecOnEveryRank) {
  for (const auto& [type, tolerance] :
       {std::pair{DataType::kFloat32, 1e-4f}, std::pair{DataType::kFloat16, 4.0f / 1024}}) {
    for (int n : {2, 3}) {
      PowerSgdOptions o;
      o.rank = 2;
      const Outputs out = runBoth(n, o, type, 4);
      for (int s = 0; s < 4; ++s) {
        const torch::Tensor host = out.host[0][s], device = out.device[0][s];
        const torch::Tensor hostBig = host.narrow(0, 0, 1280), deviceBig = device.narrow(0, 0, 1280);
        EXPECT_LE(largest(deviceBig - hostBig), tolerance * largest(hostBig))
            << dataTypeName(type) << ", " << n << " ranks, step " << s;
        EXPECT_TRUE(torch::equal(device.narrow(0, 1280, host.numel() - 1280),
                                 host.narrow(0, 1280, host.numel() - 1280)))
            << dataTypeName(type) << ", " << n << " ranks, step " << s << ": uncompressed";
        for (int r = 1; r < n; ++r) {
          EXPECT_TRUE(torch::equal(out.device[r][s], device))
              << dataTypeName(type) << ", " << n << " ranks: rank " << r << " differs, step " << s;
        }
      }
      // The error memory and Q: the same names and shapes, close values.
      ASSERT_EQ(out.deviceState[0].size(), out.hostState[0].size());
      for (size_t i = 0; i < out.hostState[0].size(); ++i) {
        const auto& [hostKey, hostValue] = out.hostState[0][i];
        const auto& [deviceKey, deviceValue] = out.deviceState[0][i];
        EXPECT_EQ(deviceKey, hostKey);
        ASSERT_EQ(deviceValue.sizes(), hostValue.sizes()) << hostKey;
        if (hostKey == kPowerSgdStepsKey) {
          EXPECT_TRUE(torch::equal(deviceValue, hostValue));
        } else {
          EXPECT_LE(largest(deviceValue - hostValue), 4 * tolerance * largest(hostValue))
              << dataTypeName(type) << ", " << n << " ranks: " << hostKey;
        }
      }
    }
  }
}

// The ablations (no error feedback, a fresh Q every step from the host
// codec's seed) agree with the host codec's too.
torch::Tensor stateEntry(const GradientCodec::NamedState& state, const std::string& key) {
  for (const auto& [name, value] : state) {
    if (name == key) return value;
  }
  ADD_FAILURE() << "no " << key << " in the codec's state";
  return torch::zeros({1});
}

// Error feedback on N ranks, the invariant that makes it lose nothing
// (Karimireddy et al. 2019; Vogels et al. 2019): each rank keeps
// E_i = X_i - M / N of its input X_i = E_i + G_i and the sum M every rank
// receives, so after every step Σ_i E_i + Σ_steps M = Σ_steps Σ_i G_i —
// what compression left out is carried, once, across the ranks. A share of
// 1 instead of 1/N would leave (N - 1)·M too much in memory, of the order
// of the gradients themselves (~1); the check holds to float rounding of
// sums of 4 steps of values of order 1 (2e-5 of the largest, ~100 ulps).
// Both codecs, on 2 and 3 ranks, fp32 wire.
TEST(DevicePowerSgd, ErrorMemoryAndOutputsAddUpToTheGradientsOnEveryWorldSize) {
  const Model model;
  for (int n : {2, 3}) {
    PowerSgdOptions o;
    o.rank = 2;
    const int steps = 4;
    const Outputs out = runBoth(n, o, DataType::kFloat32, steps);
    torch::Tensor gradients = torch::zeros({32, 40}, torch::kDouble);
    torch::Tensor received = torch::zeros({32, 40}, torch::kDouble);
    for (int s = 0; s < steps; ++s) {
      for (int r = 0; r < n; ++r) {
        gradients += gradientOf(model.bucket, r, s).narrow(0, 0, 1280).view({32, 40}).to(torch::kDouble);
      }
    }
    for (const auto* outputs : {&out.host, &out.device}) {
      torch::Tensor sum = torch::zeros({32, 40}, torch::kDouble);
      for (int s = 0; s < steps; ++s) sum += (*outputs)[0][s].narrow(0, 0, 1280).view({32, 40}).to(torch::kDouble);
      const auto& states = outputs == &out.host ? out.hostState : out.deviceState;
      for (int r = 0; r < n; ++r) {
        sum += stateEntry(states[r], ddp_detail::powerSgdErrorKey("big.weight")).to(torch::kDouble);
      }
      const double worst = (sum - gradients).abs().max().item<double>();
      EXPECT_LE(worst, 2e-5 * gradients.abs().max().item<double>())
          << (outputs == &out.host ? "host" : "device") << " codec, " << n << " ranks";
    }
  }
}

TEST(DevicePowerSgd, AblationsMatchTheHostCodec) {
  PowerSgdOptions o;
  o.rank = 2;
  o.errorFeedback = false;
  o.warmStart = false;
  const Outputs out = runBoth(2, o, DataType::kFloat32, 3);
  for (int s = 0; s < 3; ++s) {
    const torch::Tensor host = out.host[0][s], device = out.device[0][s];
    EXPECT_LE(largest(device - host), 1e-4f * largest(host)) << "step " << s;
  }
  // The steps and big.weight's Q (the one compressed); no error memory.
  EXPECT_EQ(out.deviceState[0].size(), 2u);
}

// At the full rank of a matrix (compression forced), P spans its columns:
// the sum of the ranks' gradients comes back to float rounding.
TEST(DevicePowerSgd, FullRankReconstructsTheSum) {
  const Model model;
  PowerSgdOptions o;
  o.rank = 32;
  o.minCompressionRate = 0;
  o.errorFeedback = false;
  std::vector<torch::Tensor> got(2);
  runInProcess(2, [&](Communicator& comm) {
    auto algorithm = ring();
    HostRingWire wire(comm, *algorithm);
    DevicePowerSgdCodec codec(o, DataType::kFloat32, model.params, model.names, 2, torch::kCPU);
    ASSERT_EQ(codec.rankOf(0), 32);
    ASSERT_EQ(codec.rankOf(2), 3);
    got[comm.rank()] = gradientOf(model.bucket, comm.rank(), 0);
    codec.exchange(0, model.bucket, got[comm.rank()], wire);
    EXPECT_EQ(wire.calls, 3);  // the biases, every P, every Q
  });
  const torch::Tensor want = gradientOf(model.bucket, 0, 0) + gradientOf(model.bucket, 1, 0);
  EXPECT_LE(largest(got[0] - want), 1e-4f * largest(want));
  EXPECT_TRUE(torch::equal(got[0], got[1]));
}

Bucket oneMatrix(int64_t numel) {
  Bucket bucket;
  bucket.entries = {{0, 0, numel}};
  bucket.numel = numel;
  return bucket;
}

torch::Tensor stateOf(const BucketCodec& codec, const std::string& key) {
  for (const auto& [name, value] : codec.state()) {
    if (name == key) return value;
  }
  return {};
}

// An overflowed step comes out NaN, the error memory zero and Q the last
// finite one (at the unit columns the step put it to) — decided on the device, without the host looking — and the
// next step is finite with nothing old in its error memory.
TEST(DevicePowerSgd, ANonFiniteStepIsPassedOnAndNotRemembered) {
  const torch::Tensor weight = torch::zeros({8, 10});
  PowerSgdOptions o;
  o.rank = 2;
  DevicePowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1, torch::kCPU);
  const Bucket bucket = oneMatrix(80);
  OneRankDeviceWire wire;
  torch::manual_seed(9);
  torch::Tensor g1 = torch::randn({80}), g2 = torch::randn({80}), g3 = torch::randn({80});
  codec.exchange(0, bucket, g1, wire);
  ASSERT_GT(largest(stateOf(codec, "powersgd/error/w")), 1e-3f);
  const torch::Tensor q1 = stateOf(codec, "powersgd/q/w");
  g2[23] = std::numeric_limits<float>::infinity();
  codec.exchange(0, bucket, g2, wire);
  EXPECT_TRUE(g2.isnan().all().item<bool>());
  EXPECT_TRUE(torch::equal(stateOf(codec, "powersgd/error/w"), torch::zeros({8, 10})));
  // Q as the step found it: the last finite one, at unit columns.
  const torch::Tensor q2 = stateOf(codec, "powersgd/q/w");
  EXPECT_TRUE(torch::allclose(q2, q1 / q1.norm(2, {0}, /*keepdim=*/true)));
  const torch::Tensor in3 = g3.clone();
  codec.exchange(0, bucket, g3, wire);
  EXPECT_TRUE(g3.isfinite().all().item<bool>());
  EXPECT_LE(largest(stateOf(codec, "powersgd/error/w") - (in3 - g3).view({8, 10})), 1e-6f);
}

// Why device_powersgd_cuda_test fills the blocks it takes with a finite
// value: a Q overwritten with NaN (what a block reused too early holds if
// the test fills it so) is taken for a collapsed Q and replaced by its first
// draw — at a step where Q is still its first draw the output does not
// change at all, so such a test cannot see the reuse. A Q overwritten with a
// finite value changes the step.
TEST(DevicePowerSgd, AQOverwrittenWithNanIsInvisibleAFiniteOneIsNot) {
  const torch::Tensor weight = torch::zeros({8, 10});
  PowerSgdOptions o;
  o.rank = 2;
  const Bucket bucket = oneMatrix(80);
  OneRankDeviceWire wire;
  torch::manual_seed(5);
  const torch::Tensor g = torch::randn({80});
  const auto firstStep = [&](float overwrite, bool overwritten) {
    torch::manual_seed(17);  // the same first draw of Q each time
    DevicePowerSgdCodec codec(o, DataType::kFloat32, {weight}, {"w"}, 1, torch::kCPU);
    if (overwritten) codec.loadState({{"powersgd/q/w", torch::full({10, 2}, overwrite)}});
    torch::Tensor out = g.clone();
    codec.exchange(0, bucket, out, wire);
    return out;
  };
  const torch::Tensor calm = firstStep(0, false);
  EXPECT_TRUE(torch::equal(firstStep(std::numeric_limits<float>::quiet_NaN(), true), calm));
  EXPECT_FALSE(torch::equal(firstStep(1234.5f, true), calm));
}

// A zero gradient sends back a zero Q; the next step starts again from Q's
// first draw, as the host codec does, instead of multiplying by zero for
// good.
TEST(DevicePowerSgd, AZeroGradientStepDoesNotStopCompression) {
  const torch::Tensor weight = torch::zeros({6, 5});
  PowerSgdOptions o;
  o.rank = 1;
  DevicePowerSgdCodec device(o, DataType::kFloat32, {weight}, {"w"}, 1, torch::kCPU);
  PowerSgdCodec host(o, DataType::kFloat32, {weight}, {"w"}, 1);
  const Bucket bucket = oneMatrix(30);
  OneRankDeviceWire deviceWire;
  OneRankWire hostWire;
  torch::Tensor zero = torch::zeros({30}), zeroHost = torch::zeros({30});
  device.exchange(0, bucket, zero, deviceWire);
  host.exchange(0, bucket, zeroHost.data_ptr<float>(), hostWire);
  EXPECT_TRUE(torch::equal(zero, torch::zeros({30})));
  torch::manual_seed(7);
  const torch::Tensor g = torch::randn({30});
  torch::Tensor a = g.clone(), b = g.clone();
  device.exchange(0, bucket, a, deviceWire);
  host.exchange(0, bucket, b.data_ptr<float>(), hostWire);
  EXPECT_GT(largest(a), 0.1f * largest(g));
  EXPECT_LE(largest(a - b), 1e-5f * largest(b));
}

// A checkpoint of either codec resumes on the other: the host codec's
// state loaded into the device codec (and back) gives the next step the
// host codec gives, to float rounding; another rank's shape is refused by
// name.
TEST(DevicePowerSgd, StateResumesOnTheHostCodecAndBack) {
  const torch::Tensor weight = torch::zeros({8, 10});
  PowerSgdOptions o;
  o.rank = 2;
  const Bucket bucket = oneMatrix(80);
  OneRankWire hostWire;
  OneRankDeviceWire deviceWire;
  torch::manual_seed(11);
  const torch::Tensor g1 = torch::randn({80}), g2 = torch::randn({80});
  PowerSgdCodec host(o, DataType::kFloat32, {weight}, {"w"}, 1);
  torch::Tensor x = g1.clone();
  host.exchange(0, bucket, x.data_ptr<float>(), hostWire);

  DevicePowerSgdCodec device(o, DataType::kFloat32, {weight}, {"w"}, 1, torch::kCPU);
  device.loadState(host.state());
  EXPECT_EQ(device.steps(), 1);
  PowerSgdCodec back(o, DataType::kFloat32, {weight}, {"w"}, 1);
  back.loadState(device.state());
  torch::Tensor onHost = g2.clone(), onDevice = g2.clone(), onBack = g2.clone();
  host.exchange(0, bucket, onHost.data_ptr<float>(), hostWire);
  device.exchange(0, bucket, onDevice, deviceWire);
  back.exchange(0, bucket, onBack.data_ptr<float>(), hostWire);
  EXPECT_LE(largest(onDevice - onHost), 1e-5f * largest(onHost));
  EXPECT_TRUE(torch::equal(onBack, onHost));

  PowerSgdOptions narrower = o;
  narrower.rank = 1;
  DevicePowerSgdCodec other(narrower, DataType::kFloat32, {weight}, {"w"}, 1, torch::kCPU);
  try {
    other.loadState(host.state());
    FAIL() << "a rank-2 state loaded at rank 1";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("powersgd/q/w"), std::string::npos) << e.what();
  }
}

// Refused as the host codec refuses, in its words.
TEST(DevicePowerSgd, RefusesARankThatCompressesNothing) {
  const torch::Tensor weight = torch::zeros({6, 5}), bias = torch::zeros({6});
  PowerSgdOptions o;
  o.rank = 2;
  try {
    DevicePowerSgdCodec(o, DataType::kFloat32, {weight, bias}, {"w", "b"}, 2, torch::kCPU);
    FAIL() << "rank 2 compresses nothing here";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("largest rank that compresses one is 1"),
              std::string::npos)
        << e.what();
  }
  o.rank = 0;
  EXPECT_THROW(
      DevicePowerSgdCodec(o, DataType::kFloat32, {weight, bias}, {"w", "b"}, 2, torch::kCPU),
      InvalidArgument);
}

// Without compression the device codec leaves the host codec's bits, in
// every wire type, on 3 ranks (uneven ring chunks): the same pack, sum
// and unpack.
TEST(DeviceCastCodec, LeavesTheHostCodecsBits) {
  const Model model;
  for (DataType type : {DataType::kFloat32, DataType::kFloat16, DataType::kBFloat16}) {
    DdpOptions o;
    o.exchangeType = type;
    runInProcess(3, [&](Communicator& comm) {
      auto algorithm = ring();
      AllreduceWire hostWire(comm, *algorithm);
      HostRingWire deviceWire(comm, *algorithm);
      auto host = makeGradientCodec(o, model.params, model.names, 3);
      auto device = makeDeviceCodec(o, model.params, model.names, 3, torch::kCPU);
      EXPECT_EQ(device->wireType(), type);
      EXPECT_EQ(device->wireBytes(model.bucket), host->wireBytes(model.bucket));
      torch::Tensor a = gradientOf(model.bucket, comm.rank(), 0) * 1000, b = a.clone();
      host->exchange(0, model.bucket, a.data_ptr<float>(), hostWire);
      device->exchange(0, model.bucket, b, deviceWire);
      EXPECT_TRUE(torch::equal(a, b)) << dataTypeName(type) << ": max difference "
                                      << largest(a - b);
    });
  }
}

}  // namespace
}  // namespace bigbatch::ddp_detail

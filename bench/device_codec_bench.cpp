// What each gradient codec costs a rank per step, beside the collective,
// over ResNet-50's gradients laid out in the DDP's buckets: the device
// codecs (src/ddp/device_codec.h — the fp16 cast and PowerSGD on the GPU
// stream, what `ddp.gpu_exchange = nccl` runs) on `device`, and the host
// codecs (src/ddp/gradient_codec.h — what `ddp.gpu_exchange = host` runs on
// the pinned mirrors, and every CPU run) on the host's threads. The wire is
// a no-op: this is the codec's own work (casts, P = X Q, Gram-Schmidt,
// Q = X^T P, P Q^T, the error memory), which a step pays on top of the
// bytes crossing the link; the bytes are reported beside it. The codec sees
// a world of 2 (so its pre-division and error update run as on 2 ranks);
// gradients are fixed random values copied in before each timed step.
//
//   device_codec_bench [cpu|cuda] [steps]     (default: cuda if present, 20)
//
// One JSON line per codec: where it ran, the median and fastest step in
// ms, wire and fp32 MB per step. scripts/device-check runs it on the GPU
// machine (section `codec`); on a CPU build it runs the device codecs on
// CPU tensors (a rehearsal of the program, not a GPU figure).
#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "bigbatch/ddp/bucket_layout.h"
#include "bigbatch/models/model_options.h"
#include "device_codec.h"
#include "gradient_codec.h"

namespace {

using namespace bigbatch;
using namespace bigbatch::ddp_detail;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 2;

class NoWire : public WireSum {
 public:
  void sum(void*, size_t, DataType) override {}
  std::pair<size_t, size_t> kept(size_t count) const override { return {0, count}; }
  const char* operation() const override { return "the codec bench"; }
};

class NoDeviceWire : public DeviceWireSum {
 public:
  void sum(const torch::Tensor&) override {}
};

struct Row {
  std::string name;
  DdpOptions options;
};

std::vector<Row> codecs() {
  std::vector<Row> rows;
  auto add = [&](std::string name, DataType wire, bool powerSgd, int rank) {
    Row r{std::move(name), {}};
    r.options.exchangeType = wire;
    r.options.compression = powerSgd ? GradientCompression::kPowerSgd : GradientCompression::kNone;
    r.options.powerSgd.rank = rank;
    rows.push_back(std::move(r));
  };
  add("fp16", DataType::kFloat16, false, 0);
  add("powersgd_r4", DataType::kFloat32, true, 4);
  add("powersgd_r2", DataType::kFloat32, true, 2);
  add("powersgd_r4_fp16", DataType::kFloat16, true, 4);
  return rows;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Times `steps` steps (after 3 warm-up ones) of `exchange` over every
// bucket, each step's gradients copied from `source` into `buckets` first,
// untimed; `sync` waits for the device.
std::pair<double, double> timeSteps(int steps, std::vector<torch::Tensor>& buckets,
                                    const std::vector<torch::Tensor>& source,
                                    const std::function<void(size_t)>& exchange,
                                    const std::function<void()>& sync) {
  std::vector<double> ms;
  for (int i = 0; i < steps + 3; ++i) {
    for (size_t b = 0; b < buckets.size(); ++b) buckets[b].copy_(source[b]);
    sync();
    const auto t0 = Clock::now();
    for (size_t b = 0; b < buckets.size(); ++b) exchange(b);
    sync();
    if (i >= 3) ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  return {median(ms), *std::min_element(ms.begin(), ms.end())};
}

void report(const std::string& codec, const std::string& where, std::pair<double, double> ms,
            int64_t wireBytes, int64_t values, size_t buckets) {
  fmt::print(
      "{{\"codec\": \"{}\", \"where\": \"{}\", \"ms\": {:.3f}, \"min_ms\": {:.3f}, "
      "\"wire_mb\": {:.3f}, \"fp32_mb\": {:.3f}, \"buckets\": {}, \"threads\": {}}}\n",
      codec, where, ms.first, ms.second, wireBytes / 1e6, values * 4 / 1e6, buckets,
      where == "cuda" ? 0 : torch::get_num_threads());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const bool cuda = argc > 1 ? std::string(argv[1]) == "cuda" : torch::cuda::is_available();
  const int steps = argc > 2 ? std::max(1, std::atoi(argv[2])) : 20;
  if (cuda && !torch::cuda::is_available()) {
    fmt::print(stderr, "device_codec_bench: no CUDA device (run it with 'cpu')\n");
    return 2;
  }
  const torch::Device device = cuda ? torch::Device(torch::kCUDA, 0) : torch::Device(torch::kCPU);
  torch::set_num_threads(static_cast<int>(std::thread::hardware_concurrency()));

  ModelOptions m;
  m.name = "resnet50";
  m.inChannels = 3;
  m.numClasses = 1000;
  std::vector<torch::Tensor> params;
  std::vector<std::string> names;
  std::vector<int64_t> numels;
  for (const auto& p : buildModel(m)->named_parameters()) {
    params.push_back(p.value().detach());
    names.push_back(p.key());
    numels.push_back(p.value().numel());
  }
  const std::vector<Bucket> layout = layoutBuckets(numels, DdpOptions{}.fusionBytes, 4);
  int64_t values = 0;
  for (const auto& b : layout) values += b.numel;

  torch::manual_seed(1);
  std::vector<torch::Tensor> source, onDevice, onHost;
  for (const auto& b : layout) {
    source.push_back(torch::randn({b.numel}) * 1e-3);
    onDevice.push_back(torch::empty({b.numel}, torch::device(device)));
    onHost.push_back(torch::empty({b.numel}));
  }
  const std::function<void()> sync = [&] {
    if (cuda) torch::cuda::synchronize(0);
  };

  for (const auto& row : codecs()) {
    auto onDev = makeDeviceCodec(row.options, params, names, kWorld, device);
    NoDeviceWire deviceWire;
    int64_t wire = 0;
    for (const auto& b : layout) wire += onDev->wireBytes(b);
    report(row.name, cuda ? "cuda" : "cpu-device-codec",
           timeSteps(
               steps, onDevice, source,
               [&](size_t b) { onDev->exchange(b, layout[b], onDevice[b], deviceWire); }, sync),
           wire, values, layout.size());

    auto onCpu = makeGradientCodec(row.options, params, names, kWorld);
    NoWire hostWire;
    report(
        row.name, "host",
        timeSteps(
            steps, onHost, source,
            [&](size_t b) { onCpu->exchange(b, layout[b], onHost[b].data_ptr<float>(), hostWire); },
            [] {}),
        wire, values, layout.size());
  }
  return 0;
}

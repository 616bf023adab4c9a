// libFuzzer target: arbitrary bytes as a checkpoint file. Every input must
// load or raise a bigbatch::Error naming the problem. Seed it with a real
// checkpoint (scripts/fuzz does) so mutations reach the unpickler.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "bigbatch/ckpt/checkpoint.h"
#include "bigbatch/common/error.h"

// With BIGBATCH_FUZZ_SEED=FILE, writes a small valid checkpoint there first
// (the seed corpus of scripts/fuzz).
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  if (const char* seed = std::getenv("BIGBATCH_FUZZ_SEED")) {
    bigbatch::Checkpoint k;
    k.config = "[train]\nbatch_size = 4\n";
    k.globalBatch = 4;
    k.parameters = {{"fc.weight", torch::ones({2, 3})}, {"fc.bias", torch::zeros({2})}};
    k.rankBuffers = {{{"bn.running_mean", torch::zeros({2})}}};
    k.rankRng = {torch::zeros({8}, torch::kUInt8)};
    k.optimizer = {{"fc.weight.momentum", torch::zeros({2, 3})}, {"step", torch::tensor(int64_t{3})}};
    k.counters = {{"best_accuracy", 0.5}};
    const auto bytes = bigbatch::serializeCheckpoint(k);
    std::ofstream(seed, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)bigbatch::parseCheckpoint(std::vector<char>(data, data + size), "fuzz");
  } catch (const bigbatch::Error&) {
  }
  return 0;
}

// A user-defined model trained data-parallel through bigbatch's public API.
// The same program runs on one process or on N under MPI, unchanged:
//
//   build/examples/custom_model                       # 1 worker
//   mpirun -np 2 build/examples/custom_model          # 2 workers (as root: --allow-run-as-root)
//   build/examples/custom_model 4000                  # only the first 4,000 training images
//
// What the user writes: the model, the data and the optimizer recipe. What
// bigbatch does: ranks, data sharding, gradient buckets exchanged during
// backward, schedules, evaluation, the run directory and the MLPerf log.
#include <bigbatch/data/dataset.h>
#include <bigbatch/train/config_schema.h>
#include <bigbatch/train/trainer.h>

#include <cstdlib>
#include <iostream>

// Any torch::nn::Module with forward(images) -> logits, via ImageClassifierImpl.
class TinyNet : public bigbatch::ImageClassifierImpl {
 public:
  TinyNet() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(16));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(32));
    fc = register_module("fc", torch::nn::Linear(32 * 7 * 7, 10));
  }
  torch::Tensor forward(torch::Tensor x) override {
    x = torch::max_pool2d(torch::relu(bn1(conv1(x))), 2);  // 28 -> 14
    x = torch::max_pool2d(torch::relu(bn2(conv2(x))), 2);  // 14 -> 7
    return fc(x.flatten(1));
  }

 private:
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  torch::nn::Linear fc{nullptr};
};

int main(int argc, char** argv) {
  try {
    // The recipe: every key has a default (`bigbatch keys` lists them).
    bigbatch::Config config = bigbatch::defaultTrainingConfig();
    config.set("train.batch_size=64");  // per worker
    config.set("train.epochs=2");
    config.set("train.label_smoothing=0.1");
    config.set("optim.lr=0.05");
    config.set("schedule.warmup_epochs=0.2");
    config.set("run.dir=runs/custom_model");
    config.set("model.channels_last=false");

    bigbatch::TrainingJob job;
    job.trainData = bigbatch::loadFashionMnist(bigbatch::kFashionMnistDefaultDir, "train");
    job.testData = bigbatch::loadFashionMnist(bigbatch::kFashionMnistDefaultDir, "test");
    if (argc > 1) job.trainData = bigbatch::takeFirst(job.trainData, std::atoll(argv[1]));
    // Every worker builds the model from the same seed: no weights are sent.
    torch::manual_seed(config.getInt("run.seed"));
    job.model = std::make_shared<TinyNet>();

    bigbatch::TrainOptions options;
    options.overwrite = true;
    bigbatch::TrainResult result = bigbatch::train(config, options, job);
    if (!result.runDir.empty()) {
      std::cout << "test accuracy " << result.finalAccuracy << " on " << result.worldSize
                << " worker(s); run directory " << result.runDir << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "custom_model: " << e.what() << "\n";
    return 1;
  }
}

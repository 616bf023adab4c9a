#include "bench_command.h"

#include <string>

namespace bigbatch {
namespace {

// A whole number of at least `lo`; CLI11 prefixes the message with the
// option's name.
CLI::Validator atLeast(long long lo) {
  return CLI::Validator(
      [lo](std::string& text) -> std::string {
        try {
          size_t used = 0;
          if (std::stoll(text, &used) >= lo && used == text.size()) return "";
        } catch (const std::exception&) {
        }
        return "must be a whole number >= " + std::to_string(lo) + " (got '" + text + "')";
      },
      "");
}

// `bench allreduce`: an nccl-tests-style sweep of the collectives.
void addBenchAllreduce(CLI::App& bench, BenchArgs& b) {
  b.allreduce = bench.add_subcommand(
      "allreduce", "nccl-tests-style allreduce sweep: time, algbw, busbw, #wrong per algorithm");
  b.allreduce->add_option("--min-bytes", b.ar.minBytes, "smallest message in bytes")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  b.allreduce->add_option("--max-bytes", b.ar.maxBytes, "largest message in bytes (sizes step x2)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  b.allreduce
      ->add_option("--algorithms", b.ar.algorithms,
                   "comma-separated: auto, shm, hierarchical, ring, halving_doubling, "
                   "recursive_doubling, mpi")
      ->capture_default_str();
  b.allreduce->add_option("--type", b.ar.type, "float32, bfloat16 or float16")
      ->capture_default_str();
  b.allreduce
      ->add_option("--iters", b.ar.iterations,
                   "timed calls per size and algorithm (0: about 2 GB moved, 5 to 200)")
      ->check(atLeast(0))
      ->capture_default_str();
  b.allreduce->add_option("--warmup", b.ar.warmup, "untimed calls before timing")
      ->check(atLeast(0))
      ->capture_default_str();
  b.allreduce->add_option("--timeout-ms", b.ar.timeoutMs, "deadline of each wait (ms)")
      ->check(atLeast(1))
      ->capture_default_str();
  b.allreduce
      ->add_option("--chunk-bytes", b.ar.shmChunkBytes,
                   "staging chunk per rank of shm and hierarchical (0: the library default)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  auto* pipelineBytes =
      b.allreduce
          ->add_option("--pipeline-bytes", b.ar.pipelineBytes,
                       "piece of hierarchical's pipeline across hosts (0: auto, a segment of the "
                       "transport a ring message)")
          ->transform(CLI::AsSizeValue(false))
          ->capture_default_str();
  b.allreduce
      ->add_flag("--no-pipeline", b.ar.noPipeline,
                 "hierarchical in one piece: its phases one after another")
      ->excludes(pipelineBytes);
  b.allreduce
      ->add_option("--segment-bytes", b.ar.segmentBytes,
                   "pipelining segment of the ring (0: the transport's own)")
      ->transform(CLI::AsSizeValue(false))
      ->capture_default_str();
  b.allreduce->add_flag("--no-memcpy", b.noMemcpy,
                        "omit the memcpy reference rows (default: shown)");
  b.allreduce->add_flag("--json", b.ar.json,
                        "one JSON object per row instead of the table (default: off)");
}

// `bench optim`: the fused optimizer step against the per-tensor loop.
void addBenchOptim(CLI::App& bench, BenchArgs& b) {
  b.optim = bench.add_subcommand(
      "optim", "fused optimizer step vs the per-tensor ATen loop, and the memory-bandwidth bound");
  b.optim
      ->add_option("--models", b.bo.models,
                   "parameter sets: resnet50 (161 tensors, 25.6 M values), cnn (the default model)")
      ->capture_default_str();
  b.optim->add_option("--optimizers", b.bo.optimizers, "lars, lamb, sgd")->capture_default_str();
  b.optim
      ->add_option(
          "--iterations", b.bo.iterations,
          "timed steps per path; 0: 4e8 / parameter values, within 20..5000 (20 for ResNet-50)")
      ->check(atLeast(0))
      ->capture_default_str();
  b.optim->add_option("--threads", b.bo.threads, "intra-op threads; 0: all cores")
      ->check(atLeast(0))
      ->capture_default_str();
  b.optim
      ->add_option("--device", b.bo.device,
                   "cpu, or cuda (the CUDA build: the fused device kernels on GPU 0)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  b.optim->add_flag("--json", b.bo.json,
                    "one JSON object per row instead of the table (default: off)");
  b.optim->add_flag("--partitioned", b.bo.partitioned,
                    "under mpirun -np N: the whole fused step vs the partitioned one "
                    "(ddp.partition = optimizer, 1/N of the parameters per rank) and the weight "
                    "all-gather, with the optimizer-state bytes of each (default: off)");
}

// `bench pipeline`: the input pipeline alone, on JPEGs or in-memory images.
void addBenchPipeline(CLI::App& bench, BenchArgs& b) {
  b.pipeline = bench.add_subcommand(
      "pipeline",
      "input pipeline on a folder of JPEGs: decode, random resized crop, flip, "
      "normalise, batch (bench/pipeline_bench.sh compares torchvision)");
  b.pipeline->add_option(
      "--dir", b.bp.dir,
      "root/<class>/<image>.jpg (bench/make_jpeg_folder.py); default: synthetic 500x375 images");
  b.pipeline->add_flag("--in-memory", b.bp.inMemory,
                       "2,048 uint8 images of --size x --size in memory instead, whole (no "
                       "decode, no crop): the path of data.dataset = synthetic and Fashion-MNIST, "
                       "into channels-last batches (default: off)");
  b.pipeline
      ->add_option("--workers", b.bp.workers,
                   "decode threads (and as many augment threads; one read thread)")
      ->check(atLeast(1))
      ->capture_default_str();
  b.pipeline->add_option("--size", b.bp.size, "output crop side in pixels")
      ->check(atLeast(1))
      ->capture_default_str();
  b.pipeline->add_option("--batch", b.bp.batch, "images per batch")
      ->check(atLeast(1))
      ->capture_default_str();
  b.pipeline->add_option("--epochs", b.bp.epochs, "epochs, each timed")
      ->check(atLeast(1))
      ->capture_default_str();
  b.pipeline->add_option("--prefetch", b.bp.prefetch, "batches in flight")
      ->check(atLeast(1))
      ->capture_default_str();
  b.pipeline->add_option("--cache-mb", b.bp.cacheMb, "decoded-image cache budget in MiB (0: none)")
      ->check(atLeast(0))
      ->capture_default_str();
  b.pipeline->add_option("--decode", b.bp.decode,
                         "where the JPEGs of --dir are decoded: cpu (libjpeg-turbo on --workers "
                         "threads) or gpu (nvJPEG on cuda:0, crop, flip and normalisation on the "
                         "GPU into bfloat16 channels-last batches, --workers host reader "
                         "threads; the CUDA build with nvJPEG)")
      ->check(CLI::IsMember({"cpu", "gpu"}))
      ->capture_default_str();
  b.pipeline->add_flag("--json", b.bp.json,
                       "one JSON object per epoch instead of the table (default: off)");
}

// `bench step`: the training step's rate, the batch resident on the device
// (and with --input, fed from the host).
void addBenchStep(CLI::App& bench, BenchArgs& b) {
  b.step = bench.add_subcommand(
      "step", "training step rate on one rank: warm-up epoch, then a timed one; the batch "
              "resident on the device (the model's cost), and with --input fed from the host");
  b.step->add_option("--model", b.bs.model, "cnn, resnet or resnet50")
      ->check(CLI::IsMember({"cnn", "resnet", "resnet50"}))
      ->capture_default_str();
  b.step->add_option("--batch", b.bs.batches,
                     "images per step, or a comma-separated sweep (16,32,64,128,256: each "
                     "precision's rates then also as plan's --device-img-s RATE@BATCH,...)")
      ->capture_default_str();
  b.step->add_option("--size", b.bs.size, "image side (synthetic 3 x size x size)")
      ->check(atLeast(8))
      ->capture_default_str();
  b.step->add_option("--steps", b.bs.steps, "steps of the warm-up epoch and of the timed one")
      ->check(atLeast(1))
      ->capture_default_str();
  b.step->add_option("--precisions", b.bs.precisions, "comma-separated: tf32, fp32, bf16, fp16")
      ->capture_default_str();
  b.step->add_option("--device", b.bs.device, "cuda, or cpu (a rehearsal)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->capture_default_str();
  b.step->add_flag("--input", b.bs.input,
                   "also rows fed by the input pipeline from host memory (default: resident only)");
  b.step->add_flag("--cuda-graph", b.bs.cudaGraph, "run.cuda_graph = true (default: off)");
  b.step->add_option("--fused-bn", b.bs.fusedBn, "model.fused_bn: auto, on or off")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  b.step->add_option("--set", b.bs.sets, "any other config key, e.g. --set optim.name=lars");
  b.step->add_option("--profile-out", b.bs.profileOut,
                     "a Kineto trace of 3 timed steps of each row's run (the CUDA build; one "
                     "file, rewritten by each row: give one precision)");
  b.step->add_option("--run-dir", b.bs.runDir,
                     "keep each row's run directory under this folder (default: a temporary one, "
                     "removed)");
  b.step->add_flag("--json", b.bs.json, "one JSON object per row instead of the table (default: off)");
}

}  // namespace

void addBenchCommands(CLI::App& app, BenchArgs& b) {
  auto* bench = app.add_subcommand("bench", "benchmarks (run multi-rank ones under mpirun)");
  bench->require_subcommand(1);
  addBenchAllreduce(*bench, b);
  addBenchOptim(*bench, b);
  addBenchPipeline(*bench, b);
  addBenchStep(*bench, b);
}

int runBench(BenchArgs& b) {
  if (*b.allreduce) {
    b.ar.memcpy = !b.noMemcpy;
    return runBenchAllreduce(b.ar);
  }
  if (*b.optim) return runBenchOptim(b.bo);
  if (*b.pipeline) return runBenchPipeline(b.bp);
  if (*b.step) return runBenchStep(b.bs);
  return -1;
}

}  // namespace bigbatch

// bigbatch: the command-line interface.
//
//   bigbatch train CONFIG.toml [--set key=value]... [--run-dir DIR] [--overwrite] [--workers N]
//                  [--init-from FILE.pt] [--resume auto|PATH] [--timeline FILE.json]
//                  [--timeline-steps A-B] [--profile-out FILE.json] [--profile-steps A-B]
//                  [--max-restarts N] [--min-workers M] [--launcher mpirun|srun]
//   bigbatch tune CONFIG.toml [--param key=spec]... [--set key=value]... [--dir DIR]
//                 [--trials N] [--min-epochs E] [--max-epochs E] [--eta N] [--budget-epochs B]
//                 [--include-recipe]
//                 [--objective accuracy|time] [--seed S] [--parallel P] [--seeds N] [--resume]
//   bigbatch keys [--markdown]
//   bigbatch export RUN_DIR|WEIGHTS.pt|CHECKPOINT OUT.pt|OUT.jit.pt
//   bigbatch plot RUN_DIR|SCALING.csv... [-o DIR]
//   bigbatch data export-folder fashion-mnist ROOT [--quality Q] [--path IDX_DIR]
//   bigbatch plan [--model NAME|--grad-mb MB] --devices N[,N...] --device-img-s X
//                 --batch-per-device B [links, precision, allreduce...] [--json]
//   bigbatch plan --published | --calibrate ROWS.jsonl
//   bigbatch bench allreduce [--min-bytes B] [--max-bytes B] [--algorithms LIST] [--json] ...
//   bigbatch bench optim [--models LIST] [--optimizers LIST] [--iterations N] [--device cpu|cuda]
//   [--json]
//                        [--partitioned]   (under mpirun)
//   bigbatch bench pipeline [--dir ROOT | --in-memory] [--decode cpu|gpu] [--workers N]
//   [--size S] [--batch B] [--epochs E] [--json]
//   bigbatch bench step [--model M] [--batch B[,B...]] [--size S] [--steps N] [--precisions LIST]
//   [--input] [--cuda-graph] [--fused-bn auto|on|off] [--device cuda|cpu] [--set key=value]...
//   [--profile-out FILE.json] [--run-dir DIR] [--json]
//
// Every error a user can cause ends with a one-line message naming the problem
// and the fix, and exit status 1 (2 for a malformed command line).
#include <CLI/CLI.hpp>
#include <unistd.h>
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <optional>
#include <tuple>

#include "bench_command.h"
#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/comm/world.h"
#include "bigbatch/common/error.h"
#include "bigbatch/version.h"
#include "bigbatch/common/stop_request.h"
#include "bigbatch/export/export_weights.h"
#include "bigbatch/train/config_schema.h"
#include "bigbatch/train/step_profiler.h"
#include "bigbatch/train/timeline.h"
#include "bigbatch/train/trainer.h"
#include "data_command.h"
#include "bigbatch/launch/launch_workers.h"
#include "plan_command.h"
#include "plot.h"
#include "process_env.h"
#include "bigbatch/launch/slurm_requeue.h"
#include "bigbatch/launch/supervise_training.h"
#include "tune_command.h"

namespace {

// `bigbatch train`'s command line.
struct TrainArgs {
  std::string configPath;
  std::vector<std::string> sets;
  std::string runDir;
  bool overwrite = false, quiet = false, verbose = false;
  int workers = 0;  // 0: run.workers
  int maxRestarts = -1;  // -1: run.max_restarts
  int minWorkers = -1;   // -1: run.min_workers
  std::string launcher;  // "": run.launcher
  std::string initFrom, resume;
  std::string timelinePath, timelineSteps = "1-100";
  std::string profileOut, profileSteps = "10-12";
};

CLI::App* addTrainCommand(CLI::App& app, TrainArgs& a) {
  auto* train = app.add_subcommand("train", "train a model from a TOML recipe (see configs/)");
  train->add_option("config", a.configPath, "TOML recipe, e.g. configs/default.toml")
      ->required()
      ->check(CLI::ExistingFile);
  train->add_option("--set", a.sets,
                    "override one config key, e.g. --set optim.lr=0.2 (repeatable; "
                    "`bigbatch keys` lists every key; default: none)");
  train->add_option("--run-dir", a.runDir,
                    "run directory (default: run.dir, else runs/<config stem>-<UTC timestamp>)");
  train->add_flag("--overwrite", a.overwrite,
                  "reuse a run directory that already holds a run (default: refuse)");
  train
      ->add_option("--init-from", a.initFrom,
                   "start from the weights of a state-dict file (a run's model.pt or a `bigbatch "
                   "export`) or of a TorchScript module file (torch.jit.script(model).save(FILE)); "
                   "names and shapes must match; default: initialise from run.seed")
      ->check(CLI::ExistingFile);
  train->add_option("--resume", a.resume,
                    "continue from a checkpoint: auto (this run's newest: in --run-dir/run.dir, "
                    "else the newest runs/<config stem>-* that has one; none: start fresh) or a "
                    "checkpoint file or directory; default: start fresh");
  train->add_option("--timeline", a.timelinePath,
                    "write a Chrome-trace timeline (chrome://tracing, Perfetto) of the traced "
                    "steps to this file: per rank data, forward, backward, each bucket's "
                    "allreduce, comm wait, optimizer, evaluation (default: none)");
  train
      ->add_option("--timeline-steps", a.timelineSteps,
                   "steps to trace, FIRST-LAST, 1-based across epochs (bounds the file size)")
      ->capture_default_str();
  CLI::Option* profileOutOption = train->add_option("--profile-out", a.profileOut,
                    "write a Kineto profile (Chrome trace: CPU operators, CUDA kernels, copies, "
                    "runtime calls) of the --profile-steps to this file; scripts/profile_summary.py "
                    "tables it. The CUDA build only (default: none)");
  train
      ->add_option("--profile-steps", a.profileSteps,
                    "steps to profile with --profile-out, FIRST-LAST, 1-based across epochs")
      ->capture_default_str()
      ->needs(profileOutOption);
  train
      ->add_option("--workers", a.workers,
                   "ranks to start on this machine through mpirun (default: run.workers, 1); "
                   "under mpirun MPI sets the world size")
      ->check(CLI::Range(1, 4096));
  train
      ->add_option("--max-restarts", a.maxRestarts,
                   "after a failure, end every process of the job and resume it from its newest "
                   "checkpoint, up to N times (default: run.max_restarts, 0: none)")
      ->check(CLI::Range(0, 1000));
  train
      ->add_option("--min-workers", a.minWorkers,
                   "under --max-restarts, go on with fewer workers, down to M, when one fails "
                   "again right after its restart (global batch kept; default: "
                   "run.min_workers, 0: never fewer)")
      ->check(CLI::Range(0, 4096));
  train
      ->add_option("--launcher", a.launcher,
                   "what starts the --workers ranks: mpirun (BIGBATCH_MPIRUN's words, if set) "
                   "or srun (inside a Slurm allocation); default: run.launcher, mpirun")
      ->check(CLI::IsMember({"mpirun", "srun"}));
  train->add_flag("-q,--quiet", a.quiet, "print only errors and warnings (default: off)");
  train->add_flag("-v,--verbose", a.verbose, "print debug messages (default: off)");
  return train;
}

int runTrain(const TrainArgs& a, int argc, char** argv) {
  // SIGUSR1 from here on asks for a stop at a checkpoint, not the process's
  // end: a preemption warning during the checks below is not lost (the
  // launcher and the supervisor take it over, common/stop_request.h).
  bigbatch::armStopRequest();
  bigbatch::Config config = bigbatch::defaultTrainingConfig();
  bigbatch::mergeRecipeFile(config, a.configPath);  // model.path, data.path: from its folder
  for (const auto& s : a.sets) config.set(s);
  // Bad input fails here, once, before any rank starts.
  bigbatch::validateTrainingConfig(config);
  const auto traced = bigbatch::parseStepRange(a.timelineSteps);
  BIGBATCH_REQUIRE(a.resume.empty() || a.initFrom.empty(), bigbatch::InvalidArgument,
                   "--resume and --init-from were both given; a resume restores the weights from "
                   "the checkpoint, so drop --init-from");
  bigbatch::TrainOptions options;
  options.configPath = a.configPath;
  options.runDir = a.runDir;
  options.overwrite = a.overwrite;
  options.initFrom = a.initFrom;
  options.resume = a.resume;
  options.timelinePath = a.timelinePath;
  std::tie(options.timelineFirstStep, options.timelineLastStep) = traced;
  if (!a.profileOut.empty()) {
    // Refused here, before any rank starts, where the build cannot profile.
    const auto profiled = bigbatch::parseStepRange(a.profileSteps);
    bigbatch::StepProfiler check(a.profileOut, profiled.first, profiled.second);
    (void)check;
    options.profilePath = a.profileOut;
    std::tie(options.profileFirstStep, options.profileLastStep) = profiled;
  }
  options.verbosity = a.quiet     ? bigbatch::Verbosity::kQuiet
                      : a.verbose ? bigbatch::Verbosity::kVerbose
                                  : bigbatch::Verbosity::kNormal;
  const int workers = a.workers > 0 ? a.workers : static_cast<int>(config.getInt("run.workers"));
  const int maxRestarts =
      a.maxRestarts >= 0 ? a.maxRestarts : static_cast<int>(config.getInt("run.max_restarts"));
  const int minWorkers =
      a.minWorkers >= 0 ? a.minWorkers : static_cast<int>(config.getInt("run.min_workers"));
  if (!a.launcher.empty()) config.set("run.launcher=" + a.launcher);
  const std::string launcher = config.getString("run.launcher");
  // mpirun, srun or torchrun started this process as one rank of a job.
  const bool underLauncher = bigbatch::launchedByLauncher();
  BIGBATCH_REQUIRE(minWorkers == 0 || maxRestarts > 0 || underLauncher, bigbatch::InvalidArgument,
                   "--min-workers {} without --max-restarts: fewer workers come only with a "
                   "restart; add --max-restarts N (e.g. 3)",
                   minWorkers);
  if (maxRestarts > 0 && !underLauncher) {
    return bigbatch::superviseTraining(config, options,
                                       {launcher, workers, maxRestarts, minWorkers}, argc, argv);
  }
  if (bigbatch::shouldLaunchWorkers(workers)) {
    // Missing data, a run directory in use, a checkpoint that does not fit:
    // one error here, not one per rank and an MPI abort.
    bigbatch::checkRunCanStart(config, options, workers);
    return bigbatch::launchWorkers(*bigbatch::RankLauncher::named(launcher), workers,
                                   static_cast<int>(config.getInt("run.threads")), argc, argv);
  }
  // A user's module file: refused before the run directory exists.
  bigbatch::checkModelLoads(config);
  bigbatch::pinLaunchedRank();  // a rank of --workers: its own CPUs, before any thread starts
  const bigbatch::TrainResult result = bigbatch::train(config, options);
  if (!result.stopped) return 0;
  // Stopped at a checkpoint on request: a rank tells its launcher (75); a
  // run that nothing launched is the top of its job, and requeues it itself.
  return underLauncher ? bigbatch::kStoppedExitStatus : bigbatch::endStoppedJob();
}

// `bigbatch plot`: run directories share each chart (a tune directory, one
// with results.csv, stands for its trials' runs); a scaling CSV gets its own.
int runPlot(const std::vector<std::string>& sources, const std::string& out) {
  namespace fs = std::filesystem;
  std::vector<std::string> runDirs;
  for (const auto& arg : sources) {
    if (fs::is_directory(arg) && fs::exists(fs::path(arg) / "results.csv")) {
      std::vector<std::string> trials;
      for (const auto& e : fs::directory_iterator(arg)) {
        if (fs::exists(e.path() / "metrics.csv")) trials.push_back(e.path().string());
      }
      BIGBATCH_REQUIRE(!trials.empty(), bigbatch::IoError,
                       "tune directory '{}' holds no trial run with a metrics.csv yet", arg);
      std::sort(trials.begin(), trials.end());
      runDirs.insert(runDirs.end(), trials.begin(), trials.end());
    } else if (fs::is_directory(arg)) {
      runDirs.push_back(arg);
    } else {
      std::printf("wrote %s\n", bigbatch::plotScaling(arg, out).c_str());
    }
  }
  if (!runDirs.empty()) {
    for (const auto& png : bigbatch::plotRuns(runDirs, out)) std::printf("wrote %s\n", png.c_str());
  }
  return 0;
}

// Ends a failed run. In a multi-rank MPI job, MPI_Abort ends every rank (a
// peer blocked in a collective would otherwise wait for its deadline, and
// MPI_Finalize could wait for ranks that are gone); the message is out first.
int failJob() {
  std::fflush(stdout);
  std::fflush(stderr);
  int initialised = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialised);
  MPI_Finalized(&finalized);
  if (initialised && !finalized) {
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size > 1) MPI_Abort(MPI_COMM_WORLD, 1);
  }
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  bigbatch::ensureProcessEnvironment();

  CLI::App app{"bigbatch: data-parallel large-batch training on libtorch + MPI"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "bigbatch " BIGBATCH_VERSION);

  TrainArgs trainArgs;
  auto* train = addTrainCommand(app, trainArgs);

  bigbatch::TuneArgs tuneArgs;
  auto* tuneCmd = bigbatch::addTuneCommand(app, tuneArgs);

  auto* keys = app.add_subcommand("keys", "list every config key with its type, default and range");
  bool markdown = false;
  keys->add_flag("--markdown", markdown, "print a Markdown table (default: plain text)");

  auto* exportCmd = app.add_subcommand(
      "export",
      "write a run's trained weights as a PyTorch state dict (torch.load reads it), or with "
      "OUT.jit.pt a model.name = torchscript run's trained module (torch.jit.load reads it)");
  std::string exportSource, exportTarget;
  exportCmd
      ->add_option("source", exportSource,
                   "a run directory (its model.pt), a weights .pt file, or a checkpoint "
                   "(its weights and the BatchNorm statistics its run evaluates with)")
      ->required()
      ->check(CLI::ExistingPath);
  exportCmd
      ->add_option("output", exportTarget,
                   "the .pt file to write (a state dict); a name ending in .jit.pt: the "
                   "TorchScript module of a torchscript run, in evaluation mode")
      ->required();

  auto* plotCmd = app.add_subcommand(
      "plot", "PNG charts of runs: accuracy, loss, learning rate, img/s (gnuplot)");
  std::vector<std::string> plotRunsArg;
  std::string plotOut = "plots";
  plotCmd
      ->add_option("runs", plotRunsArg,
                   "run directories (several runs share each chart; a `bigbatch tune` directory "
                   "stands for all its trials), and/or a scaling benchmark's CSV "
                   "(bench/scaling.sh) for scaling.png")
      ->required()
      ->check(CLI::ExistingPath);
  plotCmd->add_option("-o,--out", plotOut, "directory for the PNG files")->capture_default_str();

  bigbatch::ExportFolderArgs exportFolderArgs;
  auto* exportFolderCmd = bigbatch::addDataCommand(app, exportFolderArgs);

  bigbatch::PlanArgs planArgs;
  auto* planCmd = bigbatch::addPlanCommand(app, planArgs);

  bigbatch::BenchArgs benchArgs;
  bigbatch::addBenchCommands(app, benchArgs);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // CLI11 reports --help and --version as "errors" with code 0; anything
    // else is a malformed command line: exit status 2 (README), not CLI11's
    // own codes (105, 106, ...), so scripts can tell it from a failed run (1).
    return app.exit(e) == 0 ? 0 : 2;
  }

  try {
    if (*train) {
      return runTrain(trainArgs, argc, argv);
    }
    if (*tuneCmd) return bigbatch::runTune(tuneArgs);
    if (*plotCmd) return runPlot(plotRunsArg, plotOut);
    if (*planCmd) return bigbatch::runPlan(planArgs);
    if (*exportFolderCmd) return bigbatch::runExportFolder(exportFolderArgs);
    if (*exportCmd) {
      std::printf("%s\n", bigbatch::exportWeights(exportSource, exportTarget).c_str());
      return 0;
    }
    if (const int status = bigbatch::runBench(benchArgs); status >= 0) return status;
    if (*keys) {
      std::cout << bigbatch::describeConfigSchema(bigbatch::trainingConfigSchema(), markdown);
      return 0;
    }
  } catch (const bigbatch::Error& e) {
    std::fprintf(stderr, "bigbatch: error: %s\n", e.what());
    return failJob();
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "bigbatch: libtorch error: %s\n", e.what_without_backtrace());
    return failJob();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bigbatch: error: %s\n", e.what());
    return failJob();
  }
  return 0;
}

#include "tune_command.h"

namespace bigbatch {

CLI::App* addTuneCommand(CLI::App& app, TuneArgs& a) {
  auto* tune = app.add_subcommand(
      "tune",
      "search a recipe's hyperparameters by asynchronous successive halving, each trial a "
      "training run; writes results.csv and best.toml (docs/LARGE_BATCH.md)");
  tune->add_option("config", a.config, "the TOML recipe every trial starts from")
      ->required()
      ->check(CLI::ExistingFile);
  tune->add_option("--param", a.params,
                   "a key to search: key=lo:hi (uniform), lo:hi:log, lo:hi:int, or a,b,c (a|b|c "
                   "for lists); repeatable; replaces the recipe's [tune] params");
  tune->add_option("--set", a.sets,
                   "override a recipe key for every trial, e.g. --set train.eval_every=2");
  tune->add_option("--dir", a.dir, "the tune directory (default: tune/<recipe stem>)");
  tune->add_option("--trials", a.trials, "trials started at the lowest rung (default 12)")
      ->check(CLI::Range(1, 100000));
  tune->add_option("--min-epochs", a.minEpochs, "epochs of the lowest rung (default 1)")
      ->check(CLI::PositiveNumber);
  tune->add_option("--max-epochs", a.maxEpochs,
                   "epochs of the top rung, the recipe's budget (default: train.epochs, or the "
                   "largest searched)")
      ->check(CLI::PositiveNumber);
  tune->add_option("--eta", a.eta, "keep the best 1/eta of each rung (default 3)")
      ->check(CLI::Range(2, 1000));
  tune->add_option("--budget-epochs", a.budgetEpochs,
                   "epochs the search may train in all, seed re-runs excluded (default: no cap; "
                   "successive halving promotes as rungs allow, so --trials alone does not bound "
                   "them)")
      ->check(CLI::Range(1LL, 100000000LL));
  tune->add_flag("--include-recipe", a.includeRecipe,
                 "trial 0 runs the recipe's own values of the searched keys, so the search "
                 "competes with the recipe it refines (default: every trial drawn)");
  tune->add_option("--objective", a.objective,
                   "accuracy (the last evaluation's, larger is better) or time (seconds to "
                   "train.target_accuracy, smaller is better; trials stop at the target)")
      ->check(CLI::IsMember({"accuracy", "time"}));
  tune->add_option("--seed", a.seed, "seed of the trial values' draws (default 1)")
      ->check(CLI::Range(0LL, 4294967295LL));
  tune->add_option("--parallel", a.parallel,
                   "jobs at once, the CPUs split evenly between them (default 1; 1 with "
                   "--objective time)")
      ->check(CLI::Range(1, 256));
  tune->add_option("--seeds", a.seeds,
                   "re-runs of the best trial with run.seed + 1, + 2, ... (default 2)")
      ->check(CLI::Range(0, 100));
  tune->add_flag("--resume", a.resume,
                 "continue the tune in --dir: finished jobs are not run again, the ones a kill "
                 "interrupted continue from their checkpoints");
  return tune;
}

}  // namespace bigbatch

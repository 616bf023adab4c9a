// `bigbatch tune RECIPE.toml`: automatic hyperparameter search over a
// recipe's keys by asynchronous successive halving (src/tune), each trial an
// ordinary `bigbatch train` run in its own run directory under the tune
// directory, then the best trial re-run with more seeds and written as a
// ready recipe.
//
// The search comes from `--param key=spec` (repeatable) or the recipe's
// `[tune]` table (`bigbatch train` skips that table), the command line
// winning key by key:
//
//   [tune]
//   params = ["optim.lr=20:80:log", "schedule.warmup_epochs=1,2,3"]
//   trials = 12          # trials started at the lowest rung
//   min_epochs = 2       # the lowest rung
//   max_epochs = 20      # the top rung (default: train.epochs)
//   eta = 3              # keep the best 1/eta of each rung
//   budget_epochs = 60   # epochs the search may train in all (default: no cap)
//   include_recipe = true    # trial 0: the recipe's own values (default: false)
//   objective = "accuracy"   # or "time": least time to train.target_accuracy
//   seed = 1             # of the draws of trial values
//   parallel = 1         # jobs at once (the CPUs split between them)
//   seeds = 2            # more seeds for the best trial
//
// The tune directory holds: recipe.toml (the recipe as given) and tune.json
// (the settings; --resume refuses different ones), results.csv (one row per
// job: trial, rung, epochs, status, metric, accuracy, time to target,
// values), seeds.csv, trial-NNN/ run directories, logs/, and at the end
// best.toml (the recipe with the best values, comments kept) and best.json.
#pragma once

#include <CLI/CLI.hpp>

#include "bigbatch/tune/tune_job.h"
#include "bigbatch/tune/tune_request.h"

namespace bigbatch {

// The command line's fields: what the search is asked (tune_request.h).
using TuneArgs = TuneRequest;

// Declares `bigbatch tune` and its options; bigbatch::runTune runs it.
CLI::App* addTuneCommand(CLI::App& app, TuneArgs& args);

}  // namespace bigbatch

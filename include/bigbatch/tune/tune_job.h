// `bigbatch tune RECIPE.toml`: automatic hyperparameter search over a
// recipe's keys by asynchronous successive halving (asha.h), each trial an
// ordinary `bigbatch train` run in its own run directory under the tune
// directory (process_trial_runner.h), then the best trial re-run with more
// seeds and written as a ready recipe (tune_outcome.h).
//
// The order: settings, search space and recipe checked before anything is
// created (tune_settings.h); then the tune directory (a --resume must find
// the same recipe and settings there), the trial runner and the search.
//
// Threading: the caller's thread; the trials are processes.
#pragma once

#include "bigbatch/tune/tune_request.h"

namespace bigbatch {

// Runs the search; returns 0 (every failure is an exception naming it).
int runTune(const TuneRequest& request);

}  // namespace bigbatch

// `bigbatch bench allreduce|optim|pipeline|step`: the command-line
// definitions of the benchmarks (each benchmark itself lives in its own
// bench_*.cpp) and the dispatch to the one given. Called from main's
// thread only: addBenchCommands before parsing, runBench after (the
// benchmark it runs may start threads of its own).
#pragma once

#include <CLI/CLI.hpp>

#include "bench_allreduce.h"
#include "bench_optim.h"
#include "bench_pipeline.h"
#include "bench_step.h"

namespace bigbatch {

// The options of each bench subcommand, and the subcommand given.
struct BenchArgs {
  BenchAllreduceOptions ar;
  bool noMemcpy = false;
  BenchOptimOptions bo;
  BenchPipelineOptions bp;
  BenchStepOptions bs;
  CLI::App *allreduce = nullptr, *optim = nullptr, *pipeline = nullptr, *step = nullptr;
};

// Adds `bench` and its subcommands to app, filling b when parsed.
void addBenchCommands(CLI::App& app, BenchArgs& b);

// Runs the bench subcommand that was given; -1 when none was.
int runBench(BenchArgs& b);

}  // namespace bigbatch

// `bigbatch plot RUN_DIR... -o DIR`: PNG charts of one or more runs with
// gnuplot (Debian gnuplot-nox, installed by scripts/setup): accuracy (train
// and test) vs epoch, training loss vs epoch, learning rate vs step, img/s vs
// epoch — several runs on one chart, each labelled by its config.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

// Returns the PNG paths written. Throws IoError/InvalidArgument naming the
// run or file at fault.
std::vector<std::string> plotRuns(const std::vector<std::string>& runDirs, const std::string& outDir);

}  // namespace bigbatch

// `bigbatch plot RUN_DIR... -o DIR`: PNG charts of one or more runs with
// gnuplot (Debian gnuplot-nox, installed by scripts/setup): accuracy (train
// and test) vs epoch, training loss vs epoch, learning rate vs step, img/s vs
// epoch, global batch vs step — several runs on one chart, each labelled by
// its config; and a scaling benchmark's throughput vs workers.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

// Returns the PNG paths written. Throws IoError/InvalidArgument naming the
// run or file at fault.
std::vector<std::string> plotRuns(const std::vector<std::string>& runDirs, const std::string& outDir);

// scaling.png from a scaling benchmark's CSV (bench/scaling.sh: columns
// workers,img_s,...): measured throughput vs workers beside the ideal line
// (the smallest worker count's img/s per worker, times the workers).
std::string plotScaling(const std::string& csvPath, const std::string& outDir);

}  // namespace bigbatch

// Fitting a link level's α and β to measured allreduce times (the rows of
// `bigbatch bench allreduce --json`), so that a plan for this machine uses
// its own links. Every algorithm's cost is linear in α and β
// (allreduce_cost.h), so the fit is an ordinary least-squares problem in two
// unknowns, weighted by 1/time² so that small and large messages count alike
// (a relative error is minimised, not an absolute one).
//
// Rows on one host fit the intra-node level. Rows from several hosts fit the
// inter-node level, with the intra-node level taken as given.
//
// Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "bigbatch/plan/cluster.h"

namespace bigbatch::plan {

struct AllreduceSample {
  std::string algorithm;  // a plannedAlgorithms() name
  int ranks = 0;
  int localRanks = 0;  // ranks on the first host (bench's "local_ranks")
  double bytes = 0;
  double seconds = 0;
};

struct LinkFit {
  LinkLevel level;         // the fitted α (latencyUs) and bandwidth (gbps)
  bool interNode = false;  // which level was fitted
  int samples = 0;
  double rmsRelativeError = 0;  // of the fitted model over the samples
  double maxRelativeError = 0;
};

// Parses JSON lines as `bench allreduce --json` prints them; rows of other
// algorithms (memcpy, shm, mpi, auto) and rows that are not JSON objects are
// skipped. Throws IoError naming the line when a row lacks a field.
std::vector<AllreduceSample> parseBenchRows(const std::string& text);

// Fits α and β of one level to `samples` (all of one world size and layout).
// `known` supplies the intra-node level when the samples span several hosts.
// A negative fitted α (latency below what the sizes resolve) is set to 0 and
// β refitted alone. Throws InvalidArgument when fewer than two distinct sizes
// are given, the rows mix launches, or β comes out not positive (the message
// names a wider size range to measure).
LinkFit fitLink(const std::vector<AllreduceSample>& samples, const Cluster& known);

}  // namespace bigbatch::plan

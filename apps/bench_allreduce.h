// `bigbatch bench allreduce`: the nccl-tests-style allreduce benchmark, run
// under mpirun (one process per rank; a plain start is a 1-rank world).
#pragma once

#include <string>

namespace bigbatch {

struct BenchAllreduceOptions {
  size_t minBytes = 4096;                 // smallest message (bytes)
  size_t maxBytes = size_t{256} << 20;    // largest message (bytes); sizes step x2
  std::string algorithms = "auto,shm,ring,halving_doubling,recursive_doubling,mpi";
  std::string type = "float32";           // float32 | bfloat16 | float16
  int iterations = 0;                     // timed calls per size; 0: ~2 GB moved, 5..200
  int warmup = 20;                        // untimed calls per size and algorithm (auto tunes in its first 18)
  bool memcpy = true;                     // add rank 0's memcpy of the same size as a row
  bool json = false;                      // one JSON object per row instead of the table
  int64_t timeoutMs = 60000;              // per-wait deadline of the collectives (ms)
  size_t shmChunkBytes = 0;               // staging chunk of shm/hierarchical; 0: the default
  size_t segmentBytes = 0;                // pipelining segment of the ring; 0: the transport's
  size_t pipelineBytes = 0;               // hierarchical's pipeline piece; 0: the library's auto
  bool noPipeline = false;                // hierarchical in one piece
};

int runBenchAllreduce(const BenchAllreduceOptions& options);

}  // namespace bigbatch

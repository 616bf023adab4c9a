// The start of a run, before any model exists: which ranks train (the
// communicator given in TrainOptions, MPI's world under mpirun, or this
// process alone), the checkpoint a --resume continues from, rank 0's run
// directory and MLPerf log, and the agreement of every rank on all of it —
// each rank's set-up succeeded, the configs hash the same, the same
// checkpoint was found, an onStep callback is set on all ranks or none — in
// one 48-byte collective, so a mismatch ends every rank with the same clear
// error instead of a hang later.
//
// Internal to src/train; called once per run, on the training thread.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bigbatch/comm/communicator.h"
#include "bigbatch/common/config.h"
#include "bigbatch/common/mlperf_logger.h"
#include "bigbatch/train/resume.h"
#include "bigbatch/train/run_dir.h"
#include "bigbatch/train/trainer.h"
#include "run/run_device.h"
#include "watch/supervisor_watch.h"

namespace bigbatch::train_detail {

struct RunStart {
  std::unique_ptr<Communicator> ownedComm;  // null when TrainOptions::comm was given
  Communicator* comm = nullptr;
  int rank = 0;
  int worldSize = 1;
  int slot = 0;  // this rank's slot on its host (common/launch_slot.h)
  std::unique_ptr<RunDir> runDir;  // rank 0 only
  std::optional<ResumePoint> resume;
  std::vector<std::string> changedKeys;  // keys that differ from the checkpoint's config
  RunDevice device;                      // run.device, this rank's GPU
  std::unique_ptr<SupervisorWatch> supervisorWatch;  // under --max-restarts, on its host
};

// Sets the communicator's timeout (comm.timeout_s), the error rank and the
// logging; on a resume on another world size, sets c's
// train.accumulation_steps so the checkpoint's global batch is kept. Opens
// `ml` on rank 0. Throws (on every rank) what any rank's set-up threw, or a
// MismatchError when the ranks disagree.
RunStart startRun(Config& c, const TrainOptions& o, MlperfLogger& ml);

// "resuming from ..." (or "no checkpoint found") on stdout.
void announceResume(const RunStart& s, const Config& c, const TrainOptions& o);

}  // namespace bigbatch::train_detail

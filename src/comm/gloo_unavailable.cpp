// Stands in for gloo_communicator.cpp in a build without libgloo-dev: a
// torchrun start is refused, naming the fix, and MPI starts are unaffected.
#include "bigbatch/comm/gloo_communicator.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(KeyValueStore&, int, int,
                                                            const GlooOptions&) {
  BIGBATCH_THROW(InvalidArgument,
                 "this bigbatch was built without Gloo's transport, which a torchrun start "
                 "needs: install libgloo-dev (scripts/setup does) and rebuild, or start the "
                 "ranks with mpirun");
}

}  // namespace bigbatch

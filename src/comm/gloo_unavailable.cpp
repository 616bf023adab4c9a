// Stands in for gloo_communicator.cpp in a build without libgloo-dev:
// BIGBATCH_TRANSPORT=gloo is refused, naming the fix; MPI and UCX are
// unaffected.
#include "bigbatch/comm/gloo_communicator.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

std::unique_ptr<GlooCommunicator> GlooCommunicator::connect(KeyValueStore&, int, int,
                                                            const GlooOptions&) {
  BIGBATCH_THROW(InvalidArgument,
                 "this bigbatch was built without Gloo's transport (BIGBATCH_TRANSPORT=gloo): "
                 "install libgloo-dev (scripts/setup does) and rebuild, or use "
                 "BIGBATCH_TRANSPORT=ucx (the default)");
}

}  // namespace bigbatch

// Stands in for ucx_communicator.cpp in a build without libucx-dev: the UCX
// transport is refused, naming the fix; MPI and Gloo starts are unaffected.
#include "bigbatch/comm/ucx_communicator.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

std::unique_ptr<UcxCommunicator> UcxCommunicator::connect(KeyValueStore&, int, int,
                                                          const UcxOptions&) {
  BIGBATCH_THROW(InvalidArgument,
                 "this bigbatch was built without UCX: install libucx-dev (scripts/setup does) "
                 "and rebuild, or set BIGBATCH_TRANSPORT=gloo");
}

void UcxCommunicator::setTcpSegmentDefaults() {}  // no UCX in this build to tune

}  // namespace bigbatch

#include "watch/stop_watch.h"

#include "bigbatch/common/stop_request.h"

namespace bigbatch::train_detail {

bool StopWatch::due() {
  if (due_) return true;
  const double mine = stopRequested() ? 1.0 : 0.0;
  due_ = (job_.size() > 1 ? job_.allreduceMax({mine})[0] : mine) > 0;
  return due_;
}

}  // namespace bigbatch::train_detail

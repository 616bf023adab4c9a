#include "watch/stop_watch.h"

#include "bigbatch/common/stop_request.h"

namespace bigbatch::train_detail {

StopWatch::StopWatch(JobCollectives& job, std::function<bool()> requested)
    : job_(job),
      requested_(requested ? std::move(requested) : std::function<bool()>(stopRequested)) {}

bool StopWatch::due() {
  if (due_) return true;
  if (job_.size() == 1) return due_ = requested_();
  if (vote_) {  // the vote started after the previous step
    job_.finishMax(ticket_);
    if (*vote_ > 0) return due_ = true;
  }
  vote_ = std::make_shared<int64_t>(requested_() ? 1 : 0);
  ticket_ = job_.startMax(vote_, "the vote on a stop asked by SIGUSR1 (after each step)");
  return false;
}

}  // namespace bigbatch::train_detail

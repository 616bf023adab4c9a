// MpiCommunicator::group(): a process group's own MPI communicator, made by
// its members alone (MPI_Comm_create_group), after they meet under a
// deadline and compare their lists, so that a member that never comes, or
// members that list other ranks, are named instead of hanging in
// MPI_Comm_create_group. Called by each member's creating thread; MPI at
// MPI_THREAD_MULTIPLE (other groups' threads may be in MPI meanwhile).
#include <algorithm>
#include <chrono>
#include <string>
#include <vector>

#include "bigbatch/comm/mpi_communicator.h"
#include "bigbatch/comm/peer_wait.h"
#include "bigbatch/common/error.h"
#include "bigbatch/common/hash.h"

namespace bigbatch {
namespace {

// group()'s meeting and MPI_Comm_create_group, on MPI_COMM_WORLD: tags
// no other code uses (Communicator's barrier and split take 0x7ffe and
// 0x7ffd, and a world() communicator is MPI_COMM_WORLD itself).
constexpr int kMeetTag = 0x7e60;
constexpr int kCreateTag = 0x7e61;

// "[0, 1, 2, 3]", the first 16 ranks of a long list and how many more.
std::string listRanks(const std::vector<int>& ranks) {
  constexpr size_t kShown = 16;
  std::string out = "[";
  for (size_t i = 0; i < ranks.size() && i < kShown; ++i) {
    out += (i ? ", " : "") + std::to_string(ranks[i]);
  }
  if (ranks.size() > kShown) out += fmt::format(", ... {} more", ranks.size() - kShown);
  return out + "]";
}

// What group()'s members compare: the list's length and an FNV-1a hash of it.
struct GroupSignature {
  int64_t size;
  uint64_t hash;
};

GroupSignature signatureOf(const std::vector<int>& ranks) {
  return {static_cast<int64_t>(ranks.size()), fnv1a64(ranks.data(), ranks.size() * sizeof(int))};
}

// A dissemination barrier among `ranks` on MPI_COMM_WORLD (round k: send to
// the member 2^k ahead, receive from the one 2^k behind; ceil(log2 n)
// rounds), each message carrying the sender's signature of the list. On a
// missed deadline or a signature that differs, the requests still pending
// are cancelled and the error names the member.
void meetBeforeCreating(const std::vector<int>& ranks, int me, int64_t timeoutMs) {
  const int n = static_cast<int>(ranks.size());
  const GroupSignature mine = signatureOf(ranks);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeoutMs);
  for (int distance = 1; distance < n; distance *= 2) {
    const int to = ranks[(me + distance) % n];
    const int from = ranks[(me - distance % n + n) % n];
    GroupSignature theirs{};
    MPI_Request reqs[2];
    checkMpi(MPI_Irecv(&theirs, sizeof theirs, MPI_BYTE, from, kMeetTag, MPI_COMM_WORLD, &reqs[0]),
             "MPI_Irecv");
    checkMpi(MPI_Isend(&mine, sizeof mine, MPI_BYTE, to, kMeetTag, MPI_COMM_WORLD, &reqs[1]),
             "MPI_Isend");
    PeerWait idle;
    int done = 0;
    while (true) {
      checkMpi(MPI_Testall(2, reqs, &done, MPI_STATUSES_IGNORE), "MPI_Testall");
      if (done) break;
      if (std::chrono::steady_clock::now() > deadline) {
        // Cancelled and completed before this frame (their buffers) goes:
        // a receive matched meanwhile finishes writing first.
        for (MPI_Request& r : reqs) {
          if (r == MPI_REQUEST_NULL) continue;
          MPI_Cancel(&r);
          MPI_Wait(&r, MPI_STATUS_IGNORE);
        }
        const int round = __builtin_ctz(static_cast<unsigned>(distance)) + 1;
        BIGBATCH_THROW(TimeoutError,
                       "making a process group of MPI ranks {}: no word from rank {} in round {} "
                       "of the members' barrier within {} ms (rank {}, or a member it waits for, "
                       "did not call new_group with these ranks, failed or hangs)",
                       listRanks(ranks), from, round, timeoutMs, from);
      }
      idle.idle();
    }
    BIGBATCH_REQUIRE(theirs.size == mine.size && theirs.hash == mine.hash, MismatchError,
                     "making a process group of MPI ranks {}: rank {} makes a group of other "
                     "ranks ({} of them) at the same time; every member must call new_group "
                     "with the same ranks, in the same order of calls",
                     listRanks(ranks), from, theirs.size);
  }
}

}  // namespace

std::unique_ptr<MpiCommunicator> MpiCommunicator::group(const std::vector<int>& worldRanks,
                                                        int64_t timeoutMs) {
  initialise(Threads::kMultiple);
  int worldRank = 0, worldSize = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  MPI_Comm_size(MPI_COMM_WORLD, &worldSize);
  std::vector<int> sorted = worldRanks;
  std::sort(sorted.begin(), sorted.end());
  BIGBATCH_REQUIRE(!sorted.empty() && sorted.front() >= 0 && sorted.back() < worldSize &&
                       std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
                   InvalidArgument,
                   "a process group of MPI ranks {}: each must be a distinct rank of the job's "
                   "{}", listRanks(worldRanks), worldSize);
  const auto at = std::find(worldRanks.begin(), worldRanks.end(), worldRank);
  BIGBATCH_REQUIRE(at != worldRanks.end(), InvalidArgument,
                   "a process group of MPI ranks {} made on rank {}, which is not one of them",
                   listRanks(worldRanks), worldRank);
  meetBeforeCreating(worldRanks, static_cast<int>(at - worldRanks.begin()), timeoutMs);
  MPI_Group all = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  checkMpi(MPI_Comm_group(MPI_COMM_WORLD, &all), "MPI_Comm_group");
  int rc = MPI_Group_incl(all, static_cast<int>(worldRanks.size()), worldRanks.data(), &members);
  MPI_Group_free(&all);
  checkMpi(rc, "MPI_Group_incl");
  MPI_Comm out = MPI_COMM_NULL;
  rc = MPI_Comm_create_group(MPI_COMM_WORLD, members, kCreateTag, &out);
  MPI_Group_free(&members);
  checkMpi(rc, "MPI_Comm_create_group");
  std::unique_ptr<MpiCommunicator> c;
  try {
    c = std::make_unique<MpiCommunicator>(out, true);
  } catch (...) {
    MPI_Comm_free(&out);
    throw;
  }
  c->setTimeoutMs(timeoutMs);
  return c;
}

}  // namespace bigbatch

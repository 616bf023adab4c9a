#include "bigbatch/comm/mpi_communicator.h"

#include <chrono>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <deque>
#include <exception>
#include <mutex>
#include <vector>

#include "bigbatch/comm/peer_wait.h"
#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

constexpr int kErrorTag = 0x7fff;
// The thread level MPI gave, and whether bigbatch initialised it (-1: not
// initialised by bigbatch, or not yet).
int providedHere = -1;
constexpr size_t kErrorMessageMax = 4096;

// A communication thread and the caller take turns in MPI: SERIALIZED at the
// least, whatever was asked. Checked at every call, so a caught refusal
// stays one (MPI is initialised by then).
void requireSerialized(int provided) {
  BIGBATCH_REQUIRE(provided >= MPI_THREAD_SERIALIZED, InvalidArgument,
                   "this MPI provides only {}, and bigbatch needs MPI_THREAD_SERIALIZED at the "
                   "least: use an MPI built with thread support (Open MPI's default; MPICH's "
                   "--enable-threads=multiple), or start the ranks without MPI (torchrun)",
                   MpiCommunicator::threadLevelName(provided));
}

void ensureMpiInitialised(int required) {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) {
    if (providedHere >= 0) requireSerialized(providedHere);
    return;
  }
  int provided = 0;
  checkMpi(MPI_Init_thread(nullptr, nullptr, required, &provided), "MPI_Init_thread");
  providedHere = provided;
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  // (also after the refusal below: a process that exits normally, as Python
  // does on the error, finalises; bigbatch's CLI ends a job of several
  // ranks with MPI_Abort)
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
  int worldRank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &worldRank);
  setErrorRank(worldRank);  // so that the refusal names its rank
  requireSerialized(provided);
}

class MpiRequest : public Request {
 public:
  MpiRequest(MpiCommunicator* comm, MPI_Request req, size_t bytes, int peer, int tag, bool isRecv)
      : comm_(comm), req_(req), bytes_(bytes), peer_(peer), tag_(tag), isRecv_(isRecv) {}
  ~MpiRequest() override {
    if (req_ != MPI_REQUEST_NULL) {
      // Abandoned after an error: cancel so MPI does not write into freed memory.
      MPI_Cancel(&req_);
      MPI_Request_free(&req_);
    }
  }

  void wait() override {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(comm_->timeoutMs());
    PeerWait idle;  // spin, then yield (compute thread) or sleep (background)
    while (!step()) {
      if ((idle.polls() & 63) == 63) {  // every 64th unsuccessful test
        comm_->checkPeerErrors();
        if (std::chrono::steady_clock::now() > deadline) {
          comm_->markBroken();
          BIGBATCH_THROW(TimeoutError,
                         "rank {} did not {} (tag {}, {} bytes) within {} ms; the peer may have "
                         "failed, hung, or called another collective",
                         peer_, isRecv_ ? "send to this rank" : "receive from this rank", tag_,
                         bytes_, comm_->timeoutMs());
        }
      }
      idle.idle();
    }
  }

  bool test() override {
    if (step()) return true;
    comm_->checkPeerErrors();
    return false;
  }

  int source() const override { return peer_; }

 private:
  // One MPI_Test: true once complete (the received size checked).
  bool step() {
    if (req_ == MPI_REQUEST_NULL) return true;
    MPI_Status status;
    int flag = 0;
    const int rc = MPI_Test(&req_, &flag, &status);
    if (rc != MPI_SUCCESS) {
      comm_->markBroken();
      if (isRecv_ && (rc == MPI_ERR_TRUNCATE || status.MPI_ERROR == MPI_ERR_TRUNCATE)) {
        BIGBATCH_THROW(MismatchError,
                       "message from rank {} (tag {}) is larger than the {} bytes this rank "
                       "expected: the ranks called the collective with different sizes or types",
                       peer_ == MPI_ANY_SOURCE ? status.MPI_SOURCE : peer_, tag_, bytes_);
      }
      checkMpi(rc, isRecv_ ? "MPI_Irecv/MPI_Test" : "MPI_Isend/MPI_Test");
    }
    if (!flag) return false;
    req_ = MPI_REQUEST_NULL;
    if (isRecv_) {
      if (peer_ == MPI_ANY_SOURCE) peer_ = status.MPI_SOURCE;
      int count = 0;
      MPI_Get_count(&status, MPI_BYTE, &count);
      if (static_cast<size_t>(count) != bytes_) {
        comm_->markBroken();
        BIGBATCH_THROW(MismatchError,
                       "message from rank {} (tag {}) holds {} bytes, this rank expected {}: the "
                       "ranks called the collective with different sizes or types",
                       peer_, tag_, count, bytes_);
      }
    }
    return true;
  }

  MpiCommunicator* comm_;
  MPI_Request req_;
  size_t bytes_;
  int peer_, tag_;
  bool isRecv_;
};

}  // namespace

void checkMpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  BIGBATCH_THROW(IoError, "{} failed: {} (MPI error {})", call, std::string(text, len), rc);
}

bool MpiCommunicator::launchedByMpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

void MpiCommunicator::initialise(Threads threads) {
  ensureMpiInitialised(threads == Threads::kMultiple ? MPI_THREAD_MULTIPLE
                                                     : MPI_THREAD_SERIALIZED);
}

int MpiCommunicator::threadLevel() {
  int initialised = 0, provided = -1;
  MPI_Initialized(&initialised);
  if (initialised) MPI_Query_thread(&provided);
  return provided;
}

bool MpiCommunicator::initialisedByBigbatch() { return providedHere >= 0; }

const char* MpiCommunicator::threadLevelName(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    case MPI_THREAD_MULTIPLE: return "MPI_THREAD_MULTIPLE";
    default: return "an unknown thread level";
  }
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::world(Threads threads) {
  initialise(threads);
  auto comm = std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
  setErrorRank(comm->rank());
  return comm;
}

MpiCommunicator::MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
  MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
  checkMpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
  checkMpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  MPI_Comm local;
  checkMpi(MPI_Comm_split_type(comm_, MPI_COMM_TYPE_SHARED, rank_, MPI_INFO_NULL, &local),
           "MPI_Comm_split_type");
  MPI_Comm_rank(local, &localRank_);
  MPI_Comm_size(local, &localSize_);
  // A host's colour: the lowest rank on it, the same for all its ranks.
  checkMpi(MPI_Allreduce(&rank_, &hostColor_, 1, MPI_INT, MPI_MIN, local), "MPI_Allreduce");
  MPI_Comm_free(&local);
}

MpiCommunicator::~MpiCommunicator() {
  releaseSharedSegments();  // their windows are freed on comm_, so before it goes
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (owned_ && !finalized) MPI_Comm_free(&comm_);
}

std::unique_ptr<Request> MpiCommunicator::isend(const void* data, size_t bytes, int peer, int tag) {
  BIGBATCH_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), InvalidArgument,
                   "one message of {} bytes exceeds MPI's int count; split it", bytes);
  MPI_Request req;
  checkMpi(MPI_Isend(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &req), "MPI_Isend");
  return std::make_unique<MpiRequest>(this, req, bytes, peer, tag, false);
}

std::unique_ptr<Request> MpiCommunicator::irecv(void* data, size_t bytes, int peer, int tag) {
  BIGBATCH_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), InvalidArgument,
                   "one message of {} bytes exceeds MPI's int count; split it", bytes);
  MPI_Request req;
  checkMpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, peer, tag, comm_, &req), "MPI_Irecv");
  return std::make_unique<MpiRequest>(this, req, bytes, peer, tag, true);
}

std::unique_ptr<Request> MpiCommunicator::irecvAny(void* data, size_t bytes, int tag) {
  BIGBATCH_REQUIRE(bytes <= static_cast<size_t>(INT_MAX), InvalidArgument,
                   "one message of {} bytes exceeds MPI's int count; split it", bytes);
  MPI_Request req;
  checkMpi(MPI_Irecv(data, static_cast<int>(bytes), MPI_BYTE, MPI_ANY_SOURCE, tag, comm_, &req),
           "MPI_Irecv");
  return std::make_unique<MpiRequest>(this, req, bytes, MPI_ANY_SOURCE, tag, true);
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key) {
  // MPI_Comm_split has no deadline: a deadline-aware barrier first turns a
  // missing peer into a TimeoutError instead of a hang.
  barrier();
  MPI_Comm out;
  checkMpi(MPI_Comm_split(comm_, color, key, &out), "MPI_Comm_split");
  auto c = std::make_unique<MpiCommunicator>(out, true);
  c->setTimeoutMs(timeoutMs_);
  return c;
}

namespace {

std::atomic<int> liveWindows{0};

class MpiSharedSegment : public SharedSegment {
 public:
  MpiSharedSegment(MpiCommunicator& owner, size_t slotBytes)
      : owner_(owner), slotBytes_(slotBytes), slots_(owner.size()) {
    uint8_t* mine = nullptr;
    checkMpi(MPI_Win_allocate_shared(static_cast<MPI_Aint>(slotBytes), 1, MPI_INFO_NULL,
                                     owner.handle(), &mine, &win_),
             "MPI_Win_allocate_shared");
    ++liveWindows;
    for (int r = 0; r < owner.size(); ++r) {
      MPI_Aint bytes = 0;
      int disp = 0;
      checkMpi(MPI_Win_shared_query(win_, r, &bytes, &disp, &slots_[r]), "MPI_Win_shared_query");
      BIGBATCH_REQUIRE(static_cast<size_t>(bytes) >= slotBytes, IoError,
                       "shared window slot of rank {} holds {} bytes, expected {}", r, bytes,
                       slotBytes);
    }
    std::memset(mine, 0, slotBytes);
  }

  // MPI_Win_free is collective: every rank frees its segments in the same
  // order (replaced together, or with the communicator), and the barrier
  // first turns a missing peer into a skipped free instead of a hang.
  ~MpiSharedSegment() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized || owner_.broken() || std::uncaught_exceptions() > 0) return;
    try {
      owner_.barrier();
    } catch (const std::exception&) {
      return;  // a peer is gone: MPI_Finalize or the job's end releases the window
    }
    if (MPI_Win_free(&win_) == MPI_SUCCESS) --liveWindows;
  }

  uint8_t* slot(int rank) override { return slots_[rank]; }
  size_t slotBytes() const override { return slotBytes_; }

 private:
  MpiCommunicator& owner_;
  MPI_Win win_ = MPI_WIN_NULL;
  size_t slotBytes_;
  std::vector<uint8_t*> slots_;
};

}  // namespace

int MpiCommunicator::liveSharedWindows() { return liveWindows.load(); }

std::unique_ptr<SharedSegment> MpiCommunicator::allocateShared(size_t slotBytes) {
  // Round up to cache lines so no two ranks' slots share one.
  slotBytes = (std::max<size_t>(slotBytes, 64) + 63) / 64 * 64;
  barrier();  // MPI_Win_allocate_shared has no deadline; see split()
  auto seg = std::make_unique<MpiSharedSegment>(*this, slotBytes);
  barrier();  // every slot is zeroed before anyone uses the segment
  return seg;
}

void MpiCommunicator::postError(const std::string& message) {
  // The buffers must outlive the sends, which are never waited for: kept
  // until the process ends (a deque never moves its strings) and never
  // destroyed — a static made after MPI_Init would be destroyed before
  // MPI_Finalize, which runs from the atexit handler registered then and may
  // still read them. The mutex only guards the deque: MPI itself is entered
  // by one thread at a time on this communicator (the caller serialises).
  static std::mutex mutex;
  static auto* keepAlive = new std::deque<std::string>;
  std::lock_guard<std::mutex> lock(mutex);
  keepAlive->push_back(message.substr(0, kErrorMessageMax));
  const std::string& text = keepAlive->back();
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    MPI_Request req;
    if (MPI_Isend(text.data(), static_cast<int>(text.size()), MPI_CHAR, r, kErrorTag, comm_, &req) ==
        MPI_SUCCESS) {
      MPI_Request_free(&req);
    }
  }
}

void MpiCommunicator::checkPeerErrors() {
  int flag = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, kErrorTag, comm_, &flag, &status);
  if (!flag) return;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string text(static_cast<size_t>(count), '\0');
  MPI_Recv(text.data(), count, MPI_CHAR, status.MPI_SOURCE, kErrorTag, comm_, MPI_STATUS_IGNORE);
  markBroken();
  BIGBATCH_THROW(MismatchError, "rank {} failed: {}", status.MPI_SOURCE, text);
}

}  // namespace bigbatch

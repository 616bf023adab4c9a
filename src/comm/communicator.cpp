#include "bigbatch/comm/communicator.h"

#include <algorithm>
#include <atomic>

#include "bigbatch/common/error.h"

namespace bigbatch {

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
    case DataType::kFloat64: return 8;
  }
  BIGBATCH_THROW(InvalidArgument, "unknown DataType {}", static_cast<int>(type));
}

const char* dataTypeName(DataType type) {
  switch (type) {
    case DataType::kFloat32: return "float32";
    case DataType::kBFloat16: return "bfloat16";
    case DataType::kFloat16: return "float16";
    case DataType::kInt64: return "int64";
    case DataType::kUInt8: return "uint8";
    case DataType::kFloat64: return "float64";
  }
  return "unknown";
}

Communicator::Communicator() {
  static std::atomic<uint64_t> next{1};
  id_ = next++;
}

std::unique_ptr<Request> Communicator::irecvAny(void*, size_t, int tag) {
  BIGBATCH_THROW(InvalidArgument,
                 "a receive from any source (tag {}) over {}: this transport has none; start "
                 "with mpirun, or under torchrun with BIGBATCH_TRANSPORT=ucx (the default)",
                 tag, transportName());
}

void Communicator::send(const void* data, size_t bytes, int peer, int tag) {
  isend(data, bytes, peer, tag)->wait();
}

void Communicator::recv(void* data, size_t bytes, int peer, int tag) {
  irecv(data, bytes, peer, tag)->wait();
}

void Communicator::sendrecv(const void* sendData, size_t sendBytes, int dst, void* recvData,
                            size_t recvBytes, int src, int tag) {
  auto r = irecv(recvData, recvBytes, src, tag);
  auto s = isend(sendData, sendBytes, dst, tag);
  r->wait();
  s->wait();
}

void Communicator::barrier() {
  constexpr int kBarrierTag = 0x7ffe;
  uint8_t out = 0, in = 0;
  const int n = size();
  for (int d = 1; d < n; d *= 2) {
    sendrecv(&out, 1, (rank() + d) % n, &in, 1, (rank() - d + n) % n, kBarrierTag);
  }
}

void Communicator::setTimeoutMs(int64_t ms) {
  timeoutMs_ = ms;
  if (hostComm_) hostComm_->setTimeoutMs(ms);
  if (crossHostComm_) crossHostComm_->setTimeoutMs(ms);
}

Communicator& Communicator::hostComm() {
  if (!hostComm_) hostComm_ = splitByHost();
  return *hostComm_;
}

Communicator& Communicator::crossHostComm() {
  if (!crossHostComm_) crossHostComm_ = splitByLocalRank();
  return *crossHostComm_;
}

bool Communicator::uniformHosts() {
  if (uniformHosts_ < 0) {
    // min(localSize) == max(localSize), as max over {x, -x}.
    // Dissemination pattern: after ceil(log2 n) rounds of max every rank has
    // seen every value (max is idempotent, so overlaps do no harm).
    int64_t v[2] = {localSize(), -static_cast<int64_t>(localSize())};
    const int n = size();
    for (int d = 1; d < n; d *= 2) {
      int64_t in[2];
      sendrecv(v, sizeof v, (rank() + d) % n, in, sizeof in, (rank() - d + n) % n, 0x7ffd);
      v[0] = std::max(v[0], in[0]);
      v[1] = std::max(v[1], in[1]);
    }
    uniformHosts_ = v[0] == -v[1] ? 1 : 0;
  }
  return uniformHosts_ == 1;
}

SharedSegment& Communicator::sharedSegment(const std::string& key, size_t slotBytes) {
  BIGBATCH_REQUIRE(localSize() == size(), InvalidArgument,
                   "shared memory needs every rank on one host, but only {} of {} ranks share "
                   "this host; use the hierarchical algorithm across hosts",
                   localSize(), size());
  auto& seg = segments_[key];
  if (!seg || seg->slotBytes() < slotBytes) {
    seg.reset();
    seg = allocateShared(slotBytes);
  }
  return *seg;
}

void Communicator::releaseSharedSegments() {
  for (auto& [key, segment] : segments_) segment.reset();
  segments_.clear();
}

std::unique_ptr<SharedSegment> Communicator::allocateShared(size_t) {
  BIGBATCH_THROW(InvalidArgument, "the {} transport has no shared memory", transportName());
}

std::unique_ptr<Communicator> Communicator::splitByHost() { return split(hostColor(), rank()); }

std::unique_ptr<Communicator> Communicator::splitByLocalRank() { return split(localRank(), rank()); }

}  // namespace bigbatch

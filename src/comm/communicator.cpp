#include "bigbatch/comm/communicator.h"

#include "bigbatch/common/error.h"

namespace bigbatch {

size_t elementSize(DataType type) {
  switch (type) {
    case DataType::kFloat32: return 4;
    case DataType::kBFloat16: return 2;
    case DataType::kFloat16: return 2;
    case DataType::kInt64: return 8;
    case DataType::kUInt8: return 1;
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
  }
  return "unknown";
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

std::unique_ptr<Communicator> Communicator::splitByHost() { return split(hostColor(), rank()); }

std::unique_ptr<Communicator> Communicator::splitByLocalRank() { return split(localRank(), rank()); }

}  // namespace bigbatch

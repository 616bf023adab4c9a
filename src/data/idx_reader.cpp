#include "bigbatch/data/idx_reader.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "bigbatch/common/error.h"

namespace bigbatch {

std::string readMaybeGzip(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    BIGBATCH_THROW(IoError, "cannot open '{}': {}", path, std::strerror(errno));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return gunzipIfNeeded(ss.str(), path);
}

std::string gunzipIfNeeded(std::string raw, const std::string& path) {
  if (raw.size() < 2 || static_cast<uint8_t>(raw[0]) != 0x1f ||
      static_cast<uint8_t>(raw[1]) != 0x8b) {
    return raw;
  }
  z_stream zs{};
  // 16 + MAX_WBITS: accept the gzip wrapper.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    BIGBATCH_THROW(IoError, "'{}': cannot initialise zlib", path);
  }
  zs.next_in = reinterpret_cast<Bytef*>(raw.data());
  zs.avail_in = static_cast<uInt>(raw.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = sizeof(buffer);
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, sizeof(buffer) - zs.avail_out);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended early
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) {
    BIGBATCH_THROW(IoError, "'{}' is a truncated or corrupt gzip file ({}); re-install it "
                   "(apt-get install --reinstall dataset-fashion-mnist) or point data.path elsewhere",
                   path, zs.msg ? zs.msg : "stream ended early");
  }
  return out;
}

torch::Tensor readIdx(const std::string& path, int expectedRank) {
  return parseIdx(readMaybeGzip(path), path, expectedRank);
}

torch::Tensor parseIdx(const std::string& bytes, const std::string& path, int expectedRank) {
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  if (bytes.size() < 4 || u8(0) != 0 || u8(1) != 0) {
    BIGBATCH_THROW(IoError, "'{}' is not an IDX file: bad magic (expected 00 00 08 <rank>)", path);
  }
  if (u8(2) != 0x08) {
    BIGBATCH_THROW(IoError, "'{}': IDX element type 0x{:02x} is not supported (expected 0x08, uint8)",
                   path, u8(2));
  }
  const int rank = u8(3);
  if (rank < 1 || rank > 4 || (expectedRank && rank != expectedRank)) {
    BIGBATCH_THROW(IoError, "'{}': IDX file has {} dimensions, expected {}", path, rank,
                   expectedRank ? std::to_string(expectedRank) : std::string("1 to 4"));
  }
  const size_t header = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < header) {
    BIGBATCH_THROW(IoError, "'{}' is truncated: {} bytes, shorter than its {}-byte header", path,
                   bytes.size(), header);
  }
  std::vector<int64_t> shape;
  size_t count = 1;
  for (int d = 0; d < rank; ++d) {
    size_t o = 4 + 4 * d;
    uint32_t dim = (uint32_t(u8(o)) << 24) | (uint32_t(u8(o + 1)) << 16) |
                   (uint32_t(u8(o + 2)) << 8) | uint32_t(u8(o + 3));
    if (dim == 0 || dim > (1u << 28)) {
      BIGBATCH_THROW(IoError, "'{}': IDX dimension {} is {}, outside 1..2^28", path, d, dim);
    }
    shape.push_back(dim);
    count *= dim;
    // Stop before the product can overflow: no file holds more values
    // than it has bytes.
    if (count > bytes.size()) {
      BIGBATCH_THROW(IoError, "'{}' is truncated: its header promises more values than the "
                     "file's {} bytes hold", path, bytes.size());
    }
  }
  if (bytes.size() - header != count) {
    BIGBATCH_THROW(IoError, "'{}' is {}: header promises {} values, file holds {}", path,
                   bytes.size() - header < count ? "truncated" : "longer than its header says",
                   count, bytes.size() - header);
  }
  torch::Tensor t = torch::empty(shape, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data() + header, count);
  return t;
}

}  // namespace bigbatch

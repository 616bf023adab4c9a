#include "bigbatch/data/idx_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace {

std::string readFile(const std::string& path) {
  if (std::filesystem::is_directory(path)) {
    BIGBATCH_THROW(IoError, "'{}' is a directory, not an IDX file", path);
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    BIGBATCH_THROW(IoError, "cannot open '{}': {}", path, std::strerror(errno));
  }
  std::string bytes;
  in.seekg(0, std::ios::end);
  bytes.resize(static_cast<size_t>(std::max<std::streamoff>(in.tellg(), 0)));
  in.seekg(0);
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!in) BIGBATCH_THROW(IoError, "cannot read '{}': {}", path, std::strerror(errno));
  return bytes;
}

struct IdxHeader {
  size_t bytes = 0;            // 4 + 4 x rank
  std::vector<int64_t> shape;  // as the file declares it
};

// Magic, type, rank and dimensions: everything before the values.
IdxHeader parseHeader(const std::string& bytes, const std::string& path, int expectedRank) {
  auto u8 = [&](size_t i) { return static_cast<uint8_t>(bytes[i]); };
  if (bytes.size() < 4 || u8(0) != 0 || u8(1) != 0) {
    BIGBATCH_THROW(IoError, "'{}' is not an IDX file: bad magic (expected 00 00 08 <rank>)", path);
  }
  if (u8(2) != 0x08) {
    BIGBATCH_THROW(IoError,
                   "'{}': IDX element type 0x{:02x} is not supported (expected 0x08, uint8)", path,
                   u8(2));
  }
  const int rank = u8(3);
  if (rank < 1 || rank > 4 || (expectedRank && rank != expectedRank)) {
    BIGBATCH_THROW(IoError, "'{}': IDX file has {} dimensions, expected {}", path, rank,
                   expectedRank ? std::to_string(expectedRank) : std::string("1 to 4"));
  }
  IdxHeader h;
  h.bytes = 4 + 4 * static_cast<size_t>(rank);
  if (bytes.size() < h.bytes) {
    BIGBATCH_THROW(IoError, "'{}' is truncated: {} bytes, shorter than its {}-byte header", path,
                   bytes.size(), h.bytes);
  }
  for (int d = 0; d < rank; ++d) {
    const size_t o = 4 + 4 * d;
    const uint32_t dim = (uint32_t(u8(o)) << 24) | (uint32_t(u8(o + 1)) << 16) |
                         (uint32_t(u8(o + 2)) << 8) | uint32_t(u8(o + 3));
    if (dim == 0 || dim > (1u << 28)) {
      BIGBATCH_THROW(IoError, "'{}': IDX dimension {} is {}, outside 1..2^28", path, d, dim);
    }
    h.shape.push_back(dim);
  }
  return h;
}

size_t saturatingAdd(size_t a, size_t b) { return a > SIZE_MAX - b ? SIZE_MAX : a + b; }

// The number of values `shape` holds, SIZE_MAX where that would overflow
// (four dimensions of 2^28 pass 64 bits).
size_t saturatingProduct(const std::vector<int64_t>& shape) {
  size_t p = 1;
  for (const int64_t d : shape) {
    const auto dim = static_cast<size_t>(d);
    p = p > SIZE_MAX / dim ? SIZE_MAX : p * dim;
  }
  return p;
}

bool isGzip(const std::string& b) {
  return b.size() >= 2 && static_cast<uint8_t>(b[0]) == 0x1f && static_cast<uint8_t>(b[1]) == 0x8b;
}

// The first maxBytes of the decompressed stream (all of it, checked to its
// end, when it is shorter). Reads `gz` in place: zlib does not write to it.
std::string inflateGzip(const std::string& gz, const std::string& path, size_t maxBytes) {
  z_stream zs{};
  // 16 + MAX_WBITS: accept the gzip wrapper.
  if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK) {
    BIGBATCH_THROW(IoError, "'{}': cannot initialise zlib", path);
  }
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(gz.data()));
  zs.avail_in = static_cast<uInt>(gz.size());
  std::string out;
  char buffer[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK && out.size() < maxBytes) {
    zs.next_out = reinterpret_cast<Bytef*>(buffer);
    zs.avail_out = static_cast<uInt>(std::min(sizeof(buffer), maxBytes - out.size()));
    const uInt offered = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.append(buffer, offered - zs.avail_out);
    if (rc == Z_BUF_ERROR && zs.avail_in == 0) break;  // input ended early
  }
  inflateEnd(&zs);
  if (out.size() == maxBytes && (rc == Z_OK || rc == Z_STREAM_END))
    return out;  // the prefix asked for
  if (rc != Z_STREAM_END) {
    BIGBATCH_THROW(IoError, "'{}' is a truncated or corrupt gzip file ({}); re-install it "
                   "(apt-get install --reinstall dataset-fashion-mnist) or point data.path elsewhere",
                   path, zs.msg ? zs.msg : "stream ended early");
  }
  return out;
}

}  // namespace

std::string readMaybeGzip(const std::string& path) { return gunzipIfNeeded(readFile(path), path); }

std::string gunzipIfNeeded(std::string raw, const std::string& path, size_t maxBytes) {
  if (isGzip(raw)) return inflateGzip(raw, path, maxBytes);
  if (raw.size() > maxBytes) raw.resize(maxBytes);
  return raw;
}

torch::Tensor readIdx(const std::string& path, int expectedRank, int64_t maxItems,
                      int64_t* itemsInFile) {
  std::string raw = readFile(path);
  // Decompress the header (no IDX header is longer than 4 + 4 x 4 bytes),
  // then only as far as the first maxItems entries reach.
  constexpr size_t kLongestHeader = 4 + 4 * 4;
  const std::string head =
      isGzip(raw) ? inflateGzip(raw, path, kLongestHeader) : raw.substr(0, kLongestHeader);
  IdxHeader h = parseHeader(head, path, expectedRank);
  if (itemsInFile) *itemsInFile = h.shape[0];
  size_t wanted = SIZE_MAX;
  if (maxItems > 0) {
    h.shape[0] = std::min(h.shape[0], maxItems);
    wanted = saturatingAdd(h.bytes, saturatingProduct(h.shape));
  }
  return parseIdx(gunzipIfNeeded(std::move(raw), path, wanted), path, expectedRank, maxItems);
}

torch::Tensor parseIdx(const std::string& bytes, const std::string& path, int expectedRank,
                       int64_t maxItems) {
  IdxHeader h = parseHeader(bytes, path, expectedRank);
  const bool clipped = maxItems > 0 && h.shape[0] > maxItems;
  if (clipped) h.shape[0] = maxItems;
  // No file holds more values than it has bytes: a product past that is
  // truncation, and saturating keeps it from wrapping around first.
  const size_t count = saturatingProduct(h.shape);
  const size_t held = bytes.size() - h.bytes;
  if (count > bytes.size()) {
    BIGBATCH_THROW(IoError,
                   "'{}' is truncated: its header promises more values than the "
                   "file's {} bytes hold",
                   path, bytes.size());
  }
  if (held < count || (held > count && !clipped)) {
    BIGBATCH_THROW(IoError, "'{}' is {}: header promises {} values, file holds {}", path,
                   held < count ? "truncated" : "longer than its header says", count, held);
  }
  torch::Tensor t = torch::empty(h.shape, torch::kUInt8);
  std::memcpy(t.data_ptr<uint8_t>(), bytes.data() + h.bytes, count);
  return t;
}

}  // namespace bigbatch

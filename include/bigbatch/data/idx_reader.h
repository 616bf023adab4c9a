// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip.
//
// IDX: 2 zero bytes, a type byte (0x08 = uint8), a rank byte, then `rank`
// big-endian uint32 dimensions, then the data row-major. Any missing,
// truncated or inconsistent file is an IoError naming the file and what is
// wrong. Stateless functions; safe from any thread.
#pragma once

#include <torch/torch.h>

#include <string>

namespace bigbatch {

// Reads an IDX file of uint8 values into a uint8 tensor with the file's shape.
// `expectedRank` (0: any) checks the number of dimensions.
torch::Tensor readIdx(const std::string& path, int expectedRank = 0);

// Reads a whole file, transparently gunzipping when it starts with the gzip
// magic bytes 1f 8b.
std::string readMaybeGzip(const std::string& path);

// The in-memory halves of the two above (for tests and fuzzing); `origin`
// names the data in errors.
std::string gunzipIfNeeded(std::string bytes, const std::string& origin);
torch::Tensor parseIdx(const std::string& bytes, const std::string& origin, int expectedRank = 0);

}  // namespace bigbatch

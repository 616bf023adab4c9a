// Reader for the IDX format of MNIST and Fashion-MNIST, plain or gzip.
//
// IDX: 2 zero bytes, a type byte (0x08 = uint8), a rank byte, then `rank`
// big-endian uint32 dimensions, then the data row-major. Any missing,
// truncated or inconsistent file is an IoError naming the file and what is
// wrong. Stateless functions; safe from any thread.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>

namespace bigbatch {

// Reads an IDX file of uint8 values into a uint8 tensor with the file's shape.
// `expectedRank` (0: any) checks the number of dimensions. `maxItems` > 0
// keeps only the first maxItems entries along the first dimension and
// decompresses no further than they reach (a 1,024-image subset of
// Fashion-MNIST's 47 MB takes milliseconds, not 0.4 s); what lies beyond them
// is then neither read nor checked. `itemsInFile`, when given, receives the
// first dimension the header declares.
torch::Tensor readIdx(const std::string& path, int expectedRank = 0, int64_t maxItems = 0,
                      int64_t* itemsInFile = nullptr);

// Reads a whole file, transparently gunzipping when it starts with the gzip
// magic bytes 1f 8b.
std::string readMaybeGzip(const std::string& path);

// The in-memory halves of the two above (for tests and fuzzing); `origin`
// names the data in errors. gunzipIfNeeded stops after `maxBytes` of output
// (the whole stream, checked to its end, when it is shorter). parseIdx with
// `maxItems` > 0 reads the first maxItems entries, and then accepts bytes
// beyond them.
std::string gunzipIfNeeded(std::string bytes, const std::string& origin,
                           size_t maxBytes = SIZE_MAX);
torch::Tensor parseIdx(const std::string& bytes, const std::string& origin, int expectedRank = 0,
                       int64_t maxItems = 0);

}  // namespace bigbatch

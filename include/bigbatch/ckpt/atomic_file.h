// Crash-safe file replacement: the bytes go to `path`.tmp, are fsynced, and
// the file is renamed over `path` (then the directory is fsynced), so a crash
// at any moment leaves either the old file or the complete new one under
// that name — never a half-written one. Throws IoError naming the file and
// the system error. Thread-compatible (distinct paths from distinct threads).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

namespace bigbatch {

// Called after each chunk reaches the temporary file, with the bytes
// written so far: where a write's progress can be seen (and, in tests and
// fault injection, held: a torn temporary file).
using WriteProgress = std::function<void(size_t written)>;

// The chunk the bytes are written in, so that `progress` is called within
// a write of any size (64 KiB: a checkpoint of the default recipe is
// several).
inline constexpr size_t kWriteChunkBytes = size_t{64} << 10;

void writeFileAtomically(const std::string& path, const char* data, size_t size,
                         const WriteProgress& progress = {});

}  // namespace bigbatch

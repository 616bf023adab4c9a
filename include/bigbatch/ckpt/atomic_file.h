// Crash-safe file replacement: the bytes go to `path`.tmp, are fsynced, and
// the file is renamed over `path` (then the directory is fsynced), so a crash
// at any moment leaves either the old file or the complete new one under
// that name — never a half-written one. Throws IoError naming the file and
// the system error. Thread-compatible (distinct paths from distinct threads).
#pragma once

#include <cstddef>
#include <string>

namespace bigbatch {

void writeFileAtomically(const std::string& path, const char* data, size_t size);

}  // namespace bigbatch

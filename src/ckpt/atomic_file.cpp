#include "bigbatch/ckpt/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "bigbatch/common/error.h"

namespace bigbatch {
namespace fs = std::filesystem;

void writeFileAtomically(const std::string& path, const char* data, size_t size,
                         const WriteProgress& progress) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  BIGBATCH_REQUIRE(fd >= 0, IoError, "cannot write '{}': {}", tmp, std::strerror(errno));
  size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, std::min(size - done, kWriteChunkBytes));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      BIGBATCH_THROW(IoError, "writing '{}' failed: {} (disk full?)", tmp, std::strerror(err));
    }
    done += static_cast<size_t>(n);
    if (progress) progress(done);
  }
  const bool synced = ::fsync(fd) == 0;
  ::close(fd);
  BIGBATCH_REQUIRE(synced, IoError, "fsync of '{}' failed: {}", tmp, std::strerror(errno));
  BIGBATCH_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, IoError,
                   "cannot rename '{}' to '{}': {}", tmp, path, std::strerror(errno));
  // The rename itself is durable only once the directory is synced.
  const std::string parent = fs::path(path).parent_path().empty()
                                 ? std::string(".")
                                 : fs::path(path).parent_path().string();
  const int dfd = ::open(parent.c_str(), O_RDONLY | O_DIRECTORY);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace bigbatch

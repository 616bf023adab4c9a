#include "gloo_setup.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>

#include "bigbatch/common/error.h"
#include "store_world.h"

namespace bigbatch::gloo_setup {
namespace {

// The local address the kernel would use to reach `host` (no packet is
// sent: connect() on a UDP socket only picks the route).
std::string routeAddress(const std::string& host) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), "9", &hints, &found);
  BIGBATCH_REQUIRE(rc == 0 && found != nullptr, InvalidArgument,
                   "cannot resolve the store's host '{}' ({}): set MASTER_ADDR to an address "
                   "every rank can reach",
                   host, gai_strerror(rc));
  std::string address;
  for (addrinfo* a = found; a != nullptr && address.empty(); a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    sockaddr_storage mine{};
    socklen_t len = sizeof(mine);
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&mine), &len) == 0) {
      char text[INET6_ADDRSTRLEN] = {};
      const void* raw = mine.ss_family == AF_INET
                            ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&mine)->sin_addr)
                            : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&mine)->sin6_addr);
      if (inet_ntop(mine.ss_family, raw, text, sizeof(text)) != nullptr) address = text;
    }
    close(fd);
  }
  freeaddrinfo(found);
  BIGBATCH_REQUIRE(!address.empty(), IoError,
                   "no route from this host to the store's host '{}': set MASTER_ADDR to an "
                   "address every rank can reach, or BIGBATCH_SOCKET_IFNAME to the interface",
                   host);
  return address;
}

}  // namespace

gloo::transport::tcp::attr deviceAttr(const GlooOptions& o) {
  gloo::transport::tcp::attr attr;
  if (!o.listenAddress.empty()) {
    attr.hostname = o.listenAddress;
    return attr;
  }
  for (const char* var : {"BIGBATCH_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME"}) {
    const char* v = std::getenv(var);
    if (v != nullptr && *v != '\0') {
      attr.iface = v;
      return attr;
    }
  }
  attr.hostname = o.routeTo.empty() ? store_world::thisHostName() : routeAddress(o.routeTo);
  return attr;
}

RendezvousStore::RendezvousStore(KeyValueStore& store, std::string prefix,
                                 std::chrono::milliseconds timeout)
    : store_(store), prefix_(std::move(prefix)), timeout_(timeout) {}

void RendezvousStore::set(const std::string& key, const std::vector<char>& data) {
  store_.set(prefix_ + key, std::string(data.begin(), data.end()));
}

std::vector<char> RendezvousStore::get(const std::string& key) {
  const std::string v = store_.get(prefix_ + key, timeout_);
  return std::vector<char>(v.begin(), v.end());
}

void RendezvousStore::wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

void RendezvousStore::wait(const std::vector<std::string>& keys,
                           const std::chrono::milliseconds& timeout) {
  for (const std::string& k : keys) store_.get(prefix_ + k, timeout);
}

}  // namespace bigbatch::gloo_setup

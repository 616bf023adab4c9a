#include "bigbatch/common/host_identity.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>

namespace bigbatch {
namespace {

std::string shortName(const std::string& name) { return name.substr(0, name.find('.')); }

}  // namespace

HostIdentity thisHost() {
  HostIdentity h;
  char name[256] = {};
  if (gethostname(name, sizeof name - 1) == 0) h.name = name;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return h;
  for (const ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr) continue;
    char text[INET6_ADDRSTRLEN] = {};
    if (i->ifa_addr->sa_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(i->ifa_addr);
      if ((ntohl(a->sin_addr.s_addr) >> 24) == 127) continue;
      inet_ntop(AF_INET, &a->sin_addr, text, sizeof text);
    } else if (i->ifa_addr->sa_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(i->ifa_addr);
      if (IN6_IS_ADDR_LOOPBACK(&a->sin6_addr)) continue;
      inet_ntop(AF_INET6, &a->sin6_addr, text, sizeof text);
    } else {
      continue;
    }
    if (std::find(h.addresses.begin(), h.addresses.end(), text) == h.addresses.end()) {
      h.addresses.emplace_back(text);
    }
  }
  freeifaddrs(list);
  return h;
}

bool namesHost(const std::string& name, const HostIdentity& host) {
  if (name.empty()) return false;
  in6_addr numeric{};
  if (inet_pton(AF_INET, name.c_str(), &numeric) == 1 ||
      inet_pton(AF_INET6, name.c_str(), &numeric) == 1) {
    return std::find(host.addresses.begin(), host.addresses.end(), name) != host.addresses.end();
  }
  return !host.name.empty() && (name == host.name || shortName(name) == shortName(host.name));
}

}  // namespace bigbatch

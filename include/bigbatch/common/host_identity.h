// Which host this process runs on, as a launcher may name it: its host
// name, and the addresses of its network interfaces. A hostfile names a
// host by either (`node7`, `node7.cluster`, `10.0.0.7`), and so does a
// supervisor's slot plan (launch_slot.h); this is where a rank finds
// itself among those names.
//
// Pure functions (thisHost reads the kernel's view); thread-safe.
#pragma once

#include <string>
#include <vector>

namespace bigbatch {

struct HostIdentity {
  std::string name;                    // gethostname()
  std::vector<std::string> addresses;  // numeric IPv4 and IPv6, loopback left out
};

// This machine (this network namespace: an emulated host has its own).
HostIdentity thisHost();

// Whether a launcher's `name` for a host means `host`: its host name, the
// same short name (the part before the first '.') on either side, or one
// of its addresses. No name is looked up in DNS: a rank must not wait on a
// resolver to find its own slot.
bool namesHost(const std::string& name, const HostIdentity& host);

}  // namespace bigbatch

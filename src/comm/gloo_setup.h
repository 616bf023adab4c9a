// How a GlooCommunicator's world is set up in Gloo: the TCP device (the
// address this rank listens on) and the store Gloo's rendezvous reads and
// writes (ours, under a prefix). Private to src/comm.
//
// Threading contract: called once per world, by the thread that connects it.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/attr.h>

#include "bigbatch/comm/gloo_communicator.h"
#include "bigbatch/comm/key_value_store.h"

namespace bigbatch::gloo_setup {

// Where to listen: GlooOptions::listenAddress; else the interface named by
// BIGBATCH_SOCKET_IFNAME (or GLOO_SOCKET_IFNAME); else the local address the
// kernel routes `routeTo` through; else the host name's.
gloo::transport::tcp::attr deviceAttr(const GlooOptions& options);

// Gloo's rendezvous store over ours, its keys under `prefix`.
class RendezvousStore : public gloo::rendezvous::Store {
 public:
  RendezvousStore(KeyValueStore& store, std::string prefix, std::chrono::milliseconds timeout);
  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  KeyValueStore& store_;
  std::string prefix_;
  std::chrono::milliseconds timeout_;
};

}  // namespace bigbatch::gloo_setup

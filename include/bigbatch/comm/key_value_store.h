// KeyValueStore: the rendezvous a store-bootstrapped transport
// (UcxCommunicator, GlooCommunicator) needs — ranks publish their addresses and host names under keys and read
// each other's. Two implementations: InMemoryStore (threads of one process;
// unit tests) and the adapter over c10d's Store (c10d_store.h), which is what
// torchrun, a Kubernetes PyTorchJob and torch.distributed's env:// start use.
//
// Threading contract: implementations are safe to call from several threads
// at once (the in-memory one is shared by every rank of a test).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace bigbatch {

class KeyValueStore {
 public:
  virtual ~KeyValueStore() = default;
  virtual void set(const std::string& key, const std::string& value) = 0;
  // Blocks until `key` exists; TimeoutError after `timeout`.
  virtual std::string get(const std::string& key, std::chrono::milliseconds timeout) = 0;
  // Whether `key` exists now; never blocks on a missing key.
  virtual bool check(const std::string& key) = 0;
  // Adds `delta` to the counter at `key` (0 if absent); returns the new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;
  // Where the store lives, for messages ("127.0.0.1:29500", "in-process").
  virtual std::string describe() const = 0;
};

class InMemoryStore : public KeyValueStore {
 public:
  void set(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  std::string describe() const override { return "in-process store"; }

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace bigbatch

// The KeyValueStore over a c10d Store (TCPStore, PrefixStore, FileStore):
// the store torch.distributed hands a backend's creator, or the TCPStore
// `bigbatch train` opens at torchrun's MASTER_ADDR:MASTER_PORT
// (world.h). Thread-safe as c10d's stores are.
#pragma once

#include <memory>
#include <string>

#include <c10/util/intrusive_ptr.h>

#include "bigbatch/comm/key_value_store.h"

namespace c10d {
class Store;
}

namespace bigbatch {

// `where` names the store in messages, e.g. "MASTER_ADDR:MASTER_PORT = h0:29500".
std::unique_ptr<KeyValueStore> wrapC10dStore(c10::intrusive_ptr<c10d::Store> store,
                                             std::string where);

}  // namespace bigbatch

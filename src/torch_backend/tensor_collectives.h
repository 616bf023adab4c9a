// torch.distributed's collectives on CPU tensors, over a bigbatch
// Communicator: what the "bigbatch" backend runs on its communication
// thread, separate from PyTorch's process-group classes so that it is
// tested with in-process ranks like every other collective.
//
//   allreduce      SUM and AVG of floating-point tensors (fp32, fp64, fp16,
//                  bf16): the configured bigbatch allreduce (its algorithm
//                  choice, online tuning and shared-memory phase; 16-bit
//                  types summed in fp32 per hop). Integers (any width, and
//                  bool), and MAX, MIN and PRODUCT of any type: every rank's
//                  tensor gathered, then reduced locally in rank order — exact
//                  for integers, the same bits on every rank for floats —
//                  n·S bytes a rank instead of 2·S: the small tensors these
//                  are used for (counters, flags, metadata).
//   broadcast      binomial tree (collectives.h)
//   allgather      ring, n-1 steps (collectives.h)
//   reduce_scatter SUM of floats: ring reduce-scatter; other ops and types
//                  as allreduce's gather path
//   barrier        dissemination barrier
//   reduce         the allreduce (into a scratch copy off the root): the
//                  same bytes a rank as reduce-scatter plus a gather to the
//                  root, on the tuned algorithms; other ranks keep theirs
//   gather,        every rank straight to (from) the root, all posted at
//   scatter        once (the root's link is the limit either way)
//   all_to_all     every pair at once, posted in rotated order (rank + s)
//                  so no peer is everyone's first; uneven sizes per pair
//   *_coalesced    the list packed into one tensor, one collective, unpacked
//
// Before each collective the ranks compare what they were called with (an
// allgather of 32 bytes a rank): a rank that passes another operation,
// root, size or type raises MismatchError on every rank, naming each
// rank's call, instead of a hang or a wrong sum. Waits honour the communicator's deadline
// (TimeoutError naming the peer).
//
// Threading: one thread per rank at a time (the communicator's contract).
#pragma once

#include <torch/torch.h>

#include <string>
#include <vector>

#include "bigbatch/collectives/allreduce.h"
#include "bigbatch/comm/communicator.h"

namespace bigbatch::torch_backend {

enum class ReduceKind { kSum, kAvg, kMax, kMin, kProduct };
const char* reduceKindName(ReduceKind kind);

enum class CollectiveKind {
  kAllreduce = 1,
  kBroadcast,
  kAllgather,
  kReduceScatter,
  kBarrier,
  kCompressedAllreduce,
  kReduce,
  kGather,
  kScatter,
  kAllToAll,
  kMonitoredBarrier,
};

// What a rank passed to a collective, compared across ranks first.
struct CallSignature {
  CollectiveKind kind = CollectiveKind::kBarrier;
  int64_t detail = 0;  // the reduce kind (reduce: kind + 8 x root), the root, or a codec's id
  int64_t numel = 0;
  int64_t dtype = -1;  // c10::ScalarType, -1: none
};
std::string describeCall(const CallSignature& s);

// Throws MismatchError on every rank, naming each rank's call, unless all
// passed the same signature.
void checkSameCall(Communicator& comm, const CallSignature& mine);

// InvalidArgument naming the fix unless `kind` can reduce `t` (AVG of an
// integer tensor would round). The process group checks it on the
// caller's thread, before anything is sent.
void checkReducible(const at::Tensor& t, ReduceKind kind);

// The shape checks of allgather and reduce_scatter's lists (one tensor per
// rank, each of the other side's size and type), InvalidArgument naming the
// fix: the process group runs them on the caller's thread, where a mistake
// is the caller's exception and the group stays usable.
void checkAllgatherOutputs(const at::Tensor& input, const std::vector<at::Tensor>& outputs,
                           int ranks);
void checkReduceScatterInputs(const std::vector<at::Tensor>& inputs, const at::Tensor& output,
                              int ranks);

// In place, over the tensor's own memory (a non-contiguous tensor through a
// contiguous copy). Throws InvalidArgument for a dtype or op it cannot do
// (AVG of integers), naming the fix.
void allreduceTensor(Communicator& comm, Allreduce& algorithm, at::Tensor& tensor,
                     ReduceKind kind);
void broadcastTensor(Communicator& comm, at::Tensor& tensor, int root);
// outputs[r] receives rank r's `input`; every output has input's shape and dtype.
void allgatherTensor(Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs);
// inputs[r] is this rank's contribution to rank r's `output`.
void reduceScatterTensor(Communicator& comm, const std::vector<at::Tensor>& inputs,
                         at::Tensor& output, ReduceKind kind);
// `tensor` reduced into the root's; the other ranks' tensors unchanged.
void reduceTensor(Communicator& comm, Allreduce& algorithm, at::Tensor& tensor, ReduceKind kind,
                  int root);
// On the root, outputs[r] receives rank r's `input` (outputs: one per rank,
// each of input's size and type); elsewhere `outputs` is empty.
void gatherTensor(Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs,
                  int root);
// On the root, inputs[r] goes to rank r's `output`; elsewhere `inputs` is empty.
void scatterTensor(Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output,
                   int root);
// outputs[r] receives rank r's inputs[this rank]: one tensor per rank each
// side, of one type; a pair's sizes must agree (the transport names a
// difference), other pairs' may differ.
void allToAllTensor(Communicator& comm, std::vector<at::Tensor>& outputs,
                    const std::vector<at::Tensor>& inputs);

// The shape checks of gather, scatter and all_to_all, on the caller's thread.
void checkRootedList(const std::vector<at::Tensor>& list, const at::Tensor& like, int ranks,
                     bool isRoot, const char* op);
void checkAllToAllLists(const std::vector<at::Tensor>& outputs,
                        const std::vector<at::Tensor>& inputs, int ranks, int me);
// `tensors` packed into one contiguous 1-D tensor, and back: the coalesced
// collectives' one exchange. All of one type (InvalidArgument otherwise).
at::Tensor packTensors(const std::vector<at::Tensor>& tensors, const char* op);
void unpackTensors(const at::Tensor& packed, std::vector<at::Tensor>& tensors);

}  // namespace bigbatch::torch_backend

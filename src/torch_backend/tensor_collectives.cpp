#include "tensor_collectives.h"

#include <fmt/format.h>

#include <cstring>
#include <memory>
#include <optional>

#include "bigbatch/collectives/collectives.h"
#include "bigbatch/common/error.h"

namespace bigbatch::torch_backend {
namespace {

// Tags of the collectives written here (src/collectives/fold.h holds the
// library's; these sit in a range no other module uses).
constexpr int kGatherTag = 0x7e50;
constexpr int kScatterTag = 0x7e51;
constexpr int kAllToAllTag = 0x7e52;

// The floating-point types bigbatch's own allreduce sums.
std::optional<DataType> floatWireType(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DataType::kFloat32;
    case at::kDouble: return DataType::kFloat64;
    case at::kHalf: return DataType::kFloat16;
    case at::kBFloat16: return DataType::kBFloat16;
    default: return std::nullopt;
  }
}

const char* kindName(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::kAllreduce: return "allreduce";
    case CollectiveKind::kBroadcast: return "broadcast";
    case CollectiveKind::kAllgather: return "allgather";
    case CollectiveKind::kReduceScatter: return "reduce_scatter";
    case CollectiveKind::kBarrier: return "barrier";
    case CollectiveKind::kCompressedAllreduce: return "a bigbatch comm hook's allreduce";
    case CollectiveKind::kReduce: return "reduce";
    case CollectiveKind::kGather: return "gather";
    case CollectiveKind::kScatter: return "scatter";
    case CollectiveKind::kAllToAll: return "all_to_all";
    case CollectiveKind::kMonitoredBarrier: return "monitored_barrier";
  }
  return "?";
}

// Every rank's contiguous `t` as rows of [n, t.numel()], through one
// allgather of bytes.
at::Tensor gatherRows(Communicator& comm, const at::Tensor& t) {
  const int n = comm.size();
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  at::Tensor rows = at::empty({n, t.numel()}, t.options());
  if (bytes == 0) return rows;
  std::memcpy(static_cast<char*>(rows.data_ptr()) + comm.rank() * bytes, t.data_ptr(),
              static_cast<size_t>(bytes));
  allgather(comm, rows.data_ptr(), static_cast<size_t>(n * bytes), DataType::kUInt8,
            /*checkSignature=*/false);
  return rows;
}

// rows[0] (op) rows[1] (op) ... in rank order: the same bits on every rank.
at::Tensor reduceRows(const at::Tensor& rows, ReduceKind kind) {
  at::Tensor out = rows[0].clone();
  for (int64_t r = 1; r < rows.size(0); ++r) {
    const at::Tensor row = rows[r];
    switch (kind) {
      case ReduceKind::kSum:
      case ReduceKind::kAvg:
        out = out.scalar_type() == at::kBool ? out.logical_or(row) : out.add_(row);
        break;
      case ReduceKind::kProduct:
        out = out.scalar_type() == at::kBool ? out.logical_and(row) : out.mul_(row);
        break;
      case ReduceKind::kMax: out = at::maximum(out, row); break;
      case ReduceKind::kMin: out = at::minimum(out, row); break;
    }
  }
  return out;
}

// Runs `fn` on a contiguous view of `tensor`, copying back if it had to copy.
template <typename Fn>
void onContiguous(at::Tensor& tensor, Fn fn) {
  at::Tensor t = tensor.is_contiguous() ? tensor : tensor.contiguous();
  fn(t);
  if (!t.is_same(tensor)) tensor.copy_(t);
}

}  // namespace

void checkReducible(const at::Tensor& t, ReduceKind kind) {
  BIGBATCH_REQUIRE(kind != ReduceKind::kAvg || floatWireType(t.scalar_type()).has_value(),
                   InvalidArgument,
                   "ReduceOp.AVG of a {} tensor: the bigbatch backend averages floating-point "
                   "tensors only (an integer mean would round); use ReduceOp.SUM and divide",
                   c10::toString(t.scalar_type()));
}

const char* reduceKindName(ReduceKind kind) {
  switch (kind) {
    case ReduceKind::kSum: return "SUM";
    case ReduceKind::kAvg: return "AVG";
    case ReduceKind::kMax: return "MAX";
    case ReduceKind::kMin: return "MIN";
    case ReduceKind::kProduct: return "PRODUCT";
  }
  return "?";
}

std::string describeCall(const CallSignature& s) {
  std::string what = kindName(s.kind);
  switch (s.kind) {
    case CollectiveKind::kAllreduce:
    case CollectiveKind::kReduceScatter:
      what += fmt::format(" ({})", reduceKindName(static_cast<ReduceKind>(s.detail)));
      break;
    case CollectiveKind::kReduce:
      what += fmt::format(" ({}) to rank {}", reduceKindName(static_cast<ReduceKind>(s.detail % 8)),
                          s.detail / 8);
      break;
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kScatter: what += fmt::format(" from rank {}", s.detail); break;
    case CollectiveKind::kGather: what += fmt::format(" to rank {}", s.detail); break;
    case CollectiveKind::kCompressedAllreduce: what += fmt::format(" (codec {})", s.detail); break;
    default: break;
  }
  if (s.kind == CollectiveKind::kBarrier || s.kind == CollectiveKind::kMonitoredBarrier) {
    return what;
  }
  const std::string type =
      s.dtype >= 0 ? c10::toString(static_cast<at::ScalarType>(s.dtype)) : std::string("-");
  // Each pair's sizes are its own: the call check compares the type only.
  if (s.kind == CollectiveKind::kAllToAll) return fmt::format("{} of {}", what, type);
  return fmt::format("{} of {} {} element(s)", what, s.numel, type);
}

void checkSameCall(Communicator& comm, const CallSignature& mine) {
  constexpr int kFields = 4;
  const int n = comm.size();
  if (n == 1) return;
  std::vector<int64_t> all(static_cast<size_t>(kFields * n), 0);
  int64_t* row = all.data() + kFields * comm.rank();
  row[0] = static_cast<int64_t>(mine.kind);
  row[1] = mine.detail;
  row[2] = mine.numel;
  row[3] = mine.dtype;
  allgather(comm, all.data(), all.size(), DataType::kInt64, /*checkSignature=*/false);
  bool same = true;
  for (int r = 1; r < n; ++r) {
    same = same && std::equal(all.begin(), all.begin() + kFields, all.begin() + kFields * r);
  }
  if (same) return;
  std::string calls;
  for (int r = 0; r < n; ++r) {
    const int64_t* v = all.data() + kFields * r;
    const CallSignature s{static_cast<CollectiveKind>(v[0]), v[1], v[2], v[3]};
    calls += fmt::format("{}rank {}: {}", r == 0 ? "" : "; ", r, describeCall(s));
  }
  BIGBATCH_THROW(MismatchError,
                 "the ranks called different collectives — {} — every rank must make the same "
                 "calls in the same order, with tensors of the same size and type",
                 calls);
}

void checkAllgatherOutputs(const at::Tensor& input, const std::vector<at::Tensor>& outputs,
                           int ranks) {
  BIGBATCH_REQUIRE(static_cast<int>(outputs.size()) == ranks, InvalidArgument,
                   "allgather into {} output tensor(s) on a group of {} rank(s): give one per rank",
                   outputs.size(), ranks);
  for (const at::Tensor& o : outputs) {
    BIGBATCH_REQUIRE(o.numel() == input.numel() && o.scalar_type() == input.scalar_type(),
                     InvalidArgument,
                     "allgather: an output tensor of {} {} element(s) for an input of {} {}; "
                     "every output must match the input's size and type",
                     o.numel(), c10::toString(o.scalar_type()), input.numel(),
                     c10::toString(input.scalar_type()));
  }
}

void checkReduceScatterInputs(const std::vector<at::Tensor>& inputs, const at::Tensor& output,
                              int ranks) {
  BIGBATCH_REQUIRE(static_cast<int>(inputs.size()) == ranks, InvalidArgument,
                   "reduce_scatter of {} input tensor(s) on a group of {} rank(s): give one per "
                   "rank",
                   inputs.size(), ranks);
  for (const at::Tensor& in : inputs) {
    BIGBATCH_REQUIRE(in.numel() == output.numel() && in.scalar_type() == output.scalar_type(),
                     InvalidArgument,
                     "reduce_scatter: an input tensor of {} {} element(s) for an output of {} "
                     "{}; every input must match the output's size and type",
                     in.numel(), c10::toString(in.scalar_type()), output.numel(),
                     c10::toString(output.scalar_type()));
  }
}

void allreduceTensor(Communicator& comm, Allreduce& algorithm, at::Tensor& tensor,
                     ReduceKind kind) {
  checkReducible(tensor, kind);
  onContiguous(tensor, [&](at::Tensor& t) {
    const auto wire = floatWireType(t.scalar_type());
    if (wire && (kind == ReduceKind::kSum || kind == ReduceKind::kAvg)) {
      algorithm.run(comm, t.data_ptr(), static_cast<size_t>(t.numel()), *wire);
      if (kind == ReduceKind::kAvg) t.div_(comm.size());
      return;
    }
    if (comm.size() == 1) return;
    t.copy_(reduceRows(gatherRows(comm, t.view({-1})), kind).view_as(t));
  });
}

void broadcastTensor(Communicator& comm, at::Tensor& tensor, int root) {
  BIGBATCH_REQUIRE(root >= 0 && root < comm.size(), InvalidArgument,
                   "broadcast from rank {}: the group has ranks 0..{}", root, comm.size() - 1);
  onContiguous(tensor, [&](at::Tensor& t) {
    broadcast(comm, t.data_ptr(), static_cast<size_t>(t.numel() * t.element_size()), root);
  });
}

void allgatherTensor(Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs) {
  checkAllgatherOutputs(input, outputs, comm.size());
  const at::Tensor rows = gatherRows(comm, input.contiguous().view({-1}));
  for (size_t r = 0; r < outputs.size(); ++r) {
    outputs[r].copy_(rows[static_cast<int64_t>(r)].view(outputs[r].sizes()));
  }
}

void reduceScatterTensor(Communicator& comm, const std::vector<at::Tensor>& inputs,
                         at::Tensor& output, ReduceKind kind) {
  const int n = comm.size();
  checkReduceScatterInputs(inputs, output, n);
  checkReducible(output, kind);
  const int64_t m = output.numel();
  at::Tensor packed = at::empty({n * m}, output.options().memory_format(c10::nullopt));
  for (int r = 0; r < n; ++r) packed.narrow(0, r * m, m).copy_(inputs[r].reshape({-1}));
  const auto wire = floatWireType(output.scalar_type());
  at::Tensor mine;
  if (wire && (kind == ReduceKind::kSum || kind == ReduceKind::kAvg)) {
    reduceScatter(comm, packed.data_ptr(), static_cast<size_t>(n * m), *wire,
                  /*checkSignature=*/false);
    mine = packed.narrow(0, comm.rank() * m, m);
    if (kind == ReduceKind::kAvg) mine.div_(n);
  } else {
    const at::Tensor rows = gatherRows(comm, packed);  // [rank][chunk · m]
    mine = reduceRows(rows.narrow(1, comm.rank() * m, m), kind);
  }
  output.copy_(mine.view(output.sizes()));
}

void checkRootedList(const std::vector<at::Tensor>& list, const at::Tensor& like, int ranks,
                     bool isRoot, const char* op) {
  if (!isRoot) {
    BIGBATCH_REQUIRE(list.empty(), InvalidArgument,
                     "{}: only the root passes a list (this rank passed {} tensor(s)); pass "
                     "None (or []) on the other ranks",
                     op, list.size());
    return;
  }
  BIGBATCH_REQUIRE(static_cast<int>(list.size()) == ranks, InvalidArgument,
                   "{} with {} tensor(s) on the root of a group of {} rank(s): give one per rank",
                   op, list.size(), ranks);
  for (const at::Tensor& t : list) {
    BIGBATCH_REQUIRE(t.numel() == like.numel() && t.scalar_type() == like.scalar_type(),
                     InvalidArgument,
                     "{}: a list tensor of {} {} element(s) beside {} {}; every one must match "
                     "the rank's own tensor in size and type",
                     op, t.numel(), c10::toString(t.scalar_type()), like.numel(),
                     c10::toString(like.scalar_type()));
  }
}

void checkAllToAllLists(const std::vector<at::Tensor>& outputs,
                        const std::vector<at::Tensor>& inputs, int ranks, int me) {
  BIGBATCH_REQUIRE(static_cast<int>(outputs.size()) == ranks &&
                       static_cast<int>(inputs.size()) == ranks,
                   InvalidArgument,
                   "all_to_all with {} output and {} input tensor(s) on a group of {} rank(s): "
                   "give one per rank on each side",
                   outputs.size(), inputs.size(), ranks);
  for (int r = 0; r < ranks; ++r) {
    BIGBATCH_REQUIRE(outputs[r].scalar_type() == inputs[0].scalar_type() &&
                         inputs[r].scalar_type() == inputs[0].scalar_type(),
                     InvalidArgument,
                     "all_to_all of {} and {} tensors in one call: every tensor of the call "
                     "must have one type",
                     c10::toString(inputs[0].scalar_type()),
                     c10::toString(outputs[r].scalar_type() != inputs[0].scalar_type()
                                       ? outputs[r].scalar_type()
                                       : inputs[r].scalar_type()));
  }
  BIGBATCH_REQUIRE(outputs[static_cast<size_t>(me)].numel() == inputs[static_cast<size_t>(me)].numel(),
                   InvalidArgument,
                   "all_to_all: this rank sends itself {} element(s) but expects {} from itself",
                   inputs[static_cast<size_t>(me)].numel(), outputs[static_cast<size_t>(me)].numel());
}

at::Tensor packTensors(const std::vector<at::Tensor>& tensors, const char* op) {
  BIGBATCH_REQUIRE(!tensors.empty(), InvalidArgument, "{} of an empty list", op);
  std::vector<at::Tensor> flat;
  flat.reserve(tensors.size());
  for (const at::Tensor& t : tensors) {
    BIGBATCH_REQUIRE(t.scalar_type() == tensors[0].scalar_type(), InvalidArgument,
                     "{} of {} and {} tensors in one list: the bigbatch backend coalesces "
                     "tensors of one type; make one call per type",
                     op, c10::toString(tensors[0].scalar_type()), c10::toString(t.scalar_type()));
    flat.push_back(t.reshape({-1}));
  }
  return at::cat(flat);
}

void unpackTensors(const at::Tensor& packed, std::vector<at::Tensor>& tensors) {
  int64_t offset = 0;
  for (at::Tensor& t : tensors) {
    t.copy_(packed.narrow(0, offset, t.numel()).view(t.sizes()));
    offset += t.numel();
  }
}

void reduceTensor(Communicator& comm, Allreduce& algorithm, at::Tensor& tensor, ReduceKind kind,
                  int root) {
  BIGBATCH_REQUIRE(root >= 0 && root < comm.size(), InvalidArgument,
                   "reduce to rank {}: the group has ranks 0..{}", root, comm.size() - 1);
  // A reduce moves (n-1)/n of the tensor out of every rank and into the
  // root twice over (reduce-scatter, then gather); the allreduce moves the
  // same per rank and runs on the tuned algorithms and the shared-memory
  // phase. The other ranks reduce a scratch copy: their tensors stay as
  // they were, as NCCL's in-place reduce leaves them.
  if (comm.rank() == root) {
    allreduceTensor(comm, algorithm, tensor, kind);
    return;
  }
  at::Tensor scratch = tensor.contiguous().clone();
  allreduceTensor(comm, algorithm, scratch, kind);
}

void gatherTensor(Communicator& comm, const at::Tensor& input, std::vector<at::Tensor>& outputs,
                  int root) {
  const int n = comm.size();
  const bool isRoot = comm.rank() == root;
  checkRootedList(outputs, input, n, isRoot, "gather");
  const at::Tensor in = input.contiguous();
  const size_t bytes = static_cast<size_t>(in.numel()) * in.element_size();
  if (!isRoot) {
    comm.send(in.data_ptr(), bytes, root, kGatherTag);
    return;
  }
  std::vector<at::Tensor> staged(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> recvs;
  for (int s = 1; s < n; ++s) {
    const int r = (root + s) % n;
    at::Tensor& out = outputs[static_cast<size_t>(r)];
    staged[static_cast<size_t>(r)] = out.is_contiguous() ? out : at::empty_like(in);
    recvs.push_back(comm.irecv(staged[static_cast<size_t>(r)].data_ptr(), bytes, r, kGatherTag));
  }
  for (auto& q : recvs) q->wait();
  outputs[static_cast<size_t>(root)].copy_(in.view(outputs[static_cast<size_t>(root)].sizes()));
  for (int r = 0; r < n; ++r) {
    at::Tensor& out = outputs[static_cast<size_t>(r)];
    if (r != root && !staged[static_cast<size_t>(r)].is_same(out)) {
      out.copy_(staged[static_cast<size_t>(r)].view(out.sizes()));
    }
  }
}

void scatterTensor(Communicator& comm, const std::vector<at::Tensor>& inputs, at::Tensor& output,
                   int root) {
  const int n = comm.size();
  const bool isRoot = comm.rank() == root;
  checkRootedList(inputs, output, n, isRoot, "scatter");
  const size_t bytes = static_cast<size_t>(output.numel()) * output.element_size();
  if (!isRoot) {
    onContiguous(output, [&](at::Tensor& t) { comm.recv(t.data_ptr(), bytes, root, kScatterTag); });
    return;
  }
  std::vector<at::Tensor> staged;
  std::vector<std::unique_ptr<Request>> sends;
  for (int s = 1; s < n; ++s) {
    const int r = (root + s) % n;
    staged.push_back(inputs[static_cast<size_t>(r)].contiguous());
    sends.push_back(comm.isend(staged.back().data_ptr(), bytes, r, kScatterTag));
  }
  output.copy_(inputs[static_cast<size_t>(root)].reshape(output.sizes()));
  for (auto& q : sends) q->wait();
}

void allToAllTensor(Communicator& comm, std::vector<at::Tensor>& outputs,
                    const std::vector<at::Tensor>& inputs) {
  const int n = comm.size();
  const int me = comm.rank();
  checkAllToAllLists(outputs, inputs, n, me);
  auto bytesOf = [](const at::Tensor& t) {
    return static_cast<size_t>(t.numel()) * t.element_size();
  };
  std::vector<at::Tensor> in(static_cast<size_t>(n)), out(static_cast<size_t>(n));
  std::vector<std::unique_ptr<Request>> pending;
  // Receives first, so that every message finds its buffer posted; then
  // the sends, to rank + s at step s (each rank starts with a different
  // peer: no rank is everyone's first).
  for (int s = 1; s < n; ++s) {
    const int src = (me - s + n) % n;
    at::Tensor& o = outputs[static_cast<size_t>(src)];
    out[static_cast<size_t>(src)] = o.is_contiguous() ? o : at::empty(o.sizes(), o.options());
    pending.push_back(comm.irecv(out[static_cast<size_t>(src)].data_ptr(),
                                 bytesOf(out[static_cast<size_t>(src)]), src, kAllToAllTag));
  }
  for (int s = 1; s < n; ++s) {
    const int dst = (me + s) % n;
    in[static_cast<size_t>(dst)] = inputs[static_cast<size_t>(dst)].contiguous();
    pending.push_back(comm.isend(in[static_cast<size_t>(dst)].data_ptr(),
                                 bytesOf(in[static_cast<size_t>(dst)]), dst, kAllToAllTag));
  }
  at::Tensor& self = outputs[static_cast<size_t>(me)];
  self.copy_(inputs[static_cast<size_t>(me)].reshape(self.sizes()));
  for (auto& q : pending) q->wait();
  for (int r = 0; r < n; ++r) {
    at::Tensor& o = outputs[static_cast<size_t>(r)];
    if (r != me && !out[static_cast<size_t>(r)].is_same(o)) o.copy_(out[static_cast<size_t>(r)]);
  }
}

}  // namespace bigbatch::torch_backend

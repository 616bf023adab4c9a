// ProcessGroupBigbatch's collectives (process_group_bigbatch.h): each
// checked on the caller's thread, then queued for the communication thread
// with the call's signature (tensor_collectives.h runs them).
#include <fmt/format.h>

#include "bigbatch/common/error.h"
#include "c10d_arguments.h"
#include "process_group_bigbatch.h"
#include "wire_sums.h"

namespace bigbatch::torch_backend {

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allreduce(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceOptions& opts) {
  at::Tensor t = single(tensors, "allreduce");
  checkCpuTensor(t, "allreduce");
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "allreduce");
  checkReducible(t, kind);
  const CallSignature call{CollectiveKind::kAllreduce, static_cast<int64_t>(kind), t.numel(),
                           static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::ALLREDUCE, "bigbatch:all_reduce", {t}, call,
                 [this, t, kind]() mutable { allreduceTensor(*comm_, *algorithm_, t, kind); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::broadcast(
    std::vector<at::Tensor>& tensors, const ::c10d::BroadcastOptions& opts) {
  at::Tensor t = single(tensors, "broadcast");
  checkCpuTensor(t, "broadcast");
  const int root = static_cast<int>(opts.rootRank);
  checkRoot(root, getSize(), "broadcast from");
  const CallSignature call{CollectiveKind::kBroadcast, root, t.numel(),
                           static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::BROADCAST, "bigbatch:broadcast", {t}, call,
                 [this, t, root]() mutable { broadcastTensor(*comm_, t, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allgather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  const at::Tensor input = single(inputs, "allgather");
  checkCpuTensor(input, "allgather");
  BIGBATCH_REQUIRE(outputs.size() == 1, InvalidArgument,
                   "allgather into {} output lists: the bigbatch backend takes one list (of one "
                   "tensor per rank)",
                   outputs.size());
  std::vector<at::Tensor> out = outputs[0];
  for (const at::Tensor& o : out) checkCpuTensor(o, "allgather");
  checkAllgatherOutputs(input, out, getSize());
  const CallSignature call{CollectiveKind::kAllgather, static_cast<int64_t>(out.size()),
                           input.numel(), static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::ALLGATHER, "bigbatch:all_gather", out, call,
                 [this, input, out]() mutable { allgatherTensor(*comm_, input, out); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::_allgather_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::AllgatherOptions&) {
  checkCpuTensor(input, "all_gather_into_tensor");
  checkCpuTensor(output, "all_gather_into_tensor");
  BIGBATCH_REQUIRE(output.numel() == input.numel() * getSize() &&
                       output.scalar_type() == input.scalar_type() && output.is_contiguous(),
                   InvalidArgument,
                   "all_gather_into_tensor: the output must be contiguous, of the input's type, "
                   "with {} x {} elements (ranks x input); it has {}",
                   getSize(), input.numel(), output.numel());
  std::vector<at::Tensor> rows = output.view({getSize(), -1}).unbind(0);
  const CallSignature call{CollectiveKind::kAllgather, getSize(), input.numel(),
                           static_cast<int64_t>(input.scalar_type())};
  at::Tensor in = input;
  return enqueue(::c10d::OpType::_ALLGATHER_BASE, "bigbatch:_allgather_base", {output}, call,
                 [this, in, rows]() mutable { allgatherTensor(*comm_, in, rows); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::reduce_scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  at::Tensor output = single(outputs, "reduce_scatter");
  checkCpuTensor(output, "reduce_scatter");
  BIGBATCH_REQUIRE(inputs.size() == 1, InvalidArgument,
                   "reduce_scatter of {} input lists: the bigbatch backend takes one list (of one "
                   "tensor per rank)",
                   inputs.size());
  std::vector<at::Tensor> in = inputs[0];
  for (const at::Tensor& t : in) checkCpuTensor(t, "reduce_scatter");
  checkReduceScatterInputs(in, output, getSize());
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce_scatter");
  checkReducible(output, kind);
  const CallSignature call{CollectiveKind::kReduceScatter, static_cast<int64_t>(kind),
                           output.numel(), static_cast<int64_t>(output.scalar_type())};
  return enqueue(::c10d::OpType::REDUCE_SCATTER, "bigbatch:reduce_scatter", {output}, call,
                 [this, in, output, kind]() mutable {
                   reduceScatterTensor(*comm_, in, output, kind);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::_reduce_scatter_base(
    at::Tensor& output, at::Tensor& input, const ::c10d::ReduceScatterOptions& opts) {
  checkCpuTensor(input, "reduce_scatter_tensor");
  checkCpuTensor(output, "reduce_scatter_tensor");
  BIGBATCH_REQUIRE(input.numel() == output.numel() * getSize() &&
                       output.scalar_type() == input.scalar_type(),
                   InvalidArgument,
                   "reduce_scatter_tensor: the input must hold {} x {} elements (ranks x "
                   "output) of the output's type; it has {}",
                   getSize(), output.numel(), input.numel());
  std::vector<at::Tensor> in = input.contiguous().view({getSize(), -1}).unbind(0);
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce_scatter_tensor");
  checkReducible(output, kind);
  const CallSignature call{CollectiveKind::kReduceScatter, static_cast<int64_t>(kind),
                           output.numel(), static_cast<int64_t>(output.scalar_type())};
  at::Tensor out = output;
  return enqueue(::c10d::OpType::_REDUCE_SCATTER_BASE, "bigbatch:_reduce_scatter_base", {output},
                 call, [this, in, out, kind]() mutable {
                   reduceScatterTensor(*comm_, in, out, kind);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::barrier(const ::c10d::BarrierOptions&) {
  const CallSignature call{CollectiveKind::kBarrier, 0, 0, -1};
  return enqueue(::c10d::OpType::BARRIER, "bigbatch:barrier", {}, call,
                 [this] { comm_->barrier(); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::reduce(std::vector<at::Tensor>& tensors,
                                                              const ::c10d::ReduceOptions& opts) {
  at::Tensor t = single(tensors, "reduce");
  checkCpuTensor(t, "reduce");
  const int root = static_cast<int>(opts.rootRank);
  checkRoot(root, getSize(), "reduce to");
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "reduce");
  checkReducible(t, kind);
  const CallSignature call{CollectiveKind::kReduce, static_cast<int64_t>(kind) + 8 * root,
                           t.numel(), static_cast<int64_t>(t.scalar_type())};
  return enqueue(::c10d::OpType::REDUCE, "bigbatch:reduce", {t}, call,
                 [this, t, kind, root]() mutable {
                   reduceTensor(*comm_, *algorithm_, t, kind, root);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::gather(
    std::vector<std::vector<at::Tensor>>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::GatherOptions& opts) {
  const at::Tensor input = single(inputs, "gather");
  checkCpuTensor(input, "gather");
  const int root = static_cast<int>(opts.rootRank);
  checkRoot(root, getSize(), "gather to");
  BIGBATCH_REQUIRE(outputs.size() <= 1, InvalidArgument,
                   "gather into {} output lists: the bigbatch backend takes one list (of one "
                   "tensor per rank) on the root",
                   outputs.size());
  std::vector<at::Tensor> out = outputs.empty() ? std::vector<at::Tensor>{} : outputs[0];
  for (const at::Tensor& o : out) checkCpuTensor(o, "gather");
  checkRootedList(out, input, getSize(), getRank() == root, "gather");
  const CallSignature call{CollectiveKind::kGather, root, input.numel(),
                           static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::GATHER, "bigbatch:gather", out, call,
                 [this, input, out, root]() mutable { gatherTensor(*comm_, input, out, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::scatter(
    std::vector<at::Tensor>& outputs, std::vector<std::vector<at::Tensor>>& inputs,
    const ::c10d::ScatterOptions& opts) {
  at::Tensor output = single(outputs, "scatter");
  checkCpuTensor(output, "scatter");
  const int root = static_cast<int>(opts.rootRank);
  checkRoot(root, getSize(), "scatter from");
  BIGBATCH_REQUIRE(inputs.size() <= 1, InvalidArgument,
                   "scatter of {} input lists: the bigbatch backend takes one list (of one "
                   "tensor per rank) on the root",
                   inputs.size());
  std::vector<at::Tensor> in = inputs.empty() ? std::vector<at::Tensor>{} : inputs[0];
  for (const at::Tensor& t : in) checkCpuTensor(t, "scatter");
  checkRootedList(in, output, getSize(), getRank() == root, "scatter");
  const CallSignature call{CollectiveKind::kScatter, root, output.numel(),
                           static_cast<int64_t>(output.scalar_type())};
  return enqueue(::c10d::OpType::SCATTER, "bigbatch:scatter", {output}, call,
                 [this, in, output, root]() mutable { scatterTensor(*comm_, in, output, root); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::alltoall(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllToAllOptions&) {
  for (const at::Tensor& t : outputs) checkCpuTensor(t, "all_to_all");
  for (const at::Tensor& t : inputs) checkCpuTensor(t, "all_to_all");
  checkAllToAllLists(outputs, inputs, getSize(), getRank());
  const CallSignature call{CollectiveKind::kAllToAll, 0, 0,
                           static_cast<int64_t>(inputs[0].scalar_type())};
  std::vector<at::Tensor> out = outputs, in = inputs;
  return enqueue(::c10d::OpType::ALLTOALL, "bigbatch:all_to_all", out, call,
                 [this, out, in]() mutable { allToAllTensor(*comm_, out, in); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::alltoall_base(
    at::Tensor& output, at::Tensor& input, std::vector<int64_t>& outputSplitSizes,
    std::vector<int64_t>& inputSplitSizes, const ::c10d::AllToAllOptions&) {
  checkCpuTensor(input, "all_to_all_single");
  checkCpuTensor(output, "all_to_all_single");
  BIGBATCH_REQUIRE(input.dim() > 0 && output.dim() > 0, InvalidArgument,
                   "all_to_all_single of a 0-dimensional tensor: it splits dimension 0");
  std::vector<at::Tensor> out = splitRows(output, outputSplitSizes, getSize(), "output");
  std::vector<at::Tensor> in = splitRows(input, inputSplitSizes, getSize(), "input");
  checkAllToAllLists(out, in, getSize(), getRank());
  const CallSignature call{CollectiveKind::kAllToAll, 0, 0,
                           static_cast<int64_t>(input.scalar_type())};
  return enqueue(::c10d::OpType::ALLTOALL_BASE, "bigbatch:all_to_all_single", {output}, call,
                 [this, out, in]() mutable { allToAllTensor(*comm_, out, in); });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allreduce_coalesced(
    std::vector<at::Tensor>& tensors, const ::c10d::AllreduceCoalescedOptions& opts) {
  for (const at::Tensor& t : tensors) checkCpuTensor(t, "all_reduce_coalesced");
  const ReduceKind kind = reduceKindOf(opts.reduceOp, "all_reduce_coalesced");
  at::Tensor packed = packTensors(tensors, "all_reduce_coalesced");
  checkReducible(packed, kind);
  const CallSignature call{CollectiveKind::kAllreduce, static_cast<int64_t>(kind), packed.numel(),
                           static_cast<int64_t>(packed.scalar_type())};
  std::vector<at::Tensor> ts = tensors;
  // Packed on the caller's thread, unpacked on the communication thread:
  // the script may change its tensors once the call returns, as with gloo.
  return enqueue(::c10d::OpType::ALLREDUCE_COALESCED, "bigbatch:allreduce_coalesced", ts, call,
                 [this, packed, ts, kind]() mutable {
                   allreduceTensor(*comm_, *algorithm_, packed, kind);
                   unpackTensors(packed, ts);
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allgather_coalesced(
    std::vector<std::vector<at::Tensor>>& outputLists, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  for (const at::Tensor& t : inputs) checkCpuTensor(t, "all_gather_coalesced");
  at::Tensor packed = packTensors(inputs, "all_gather_coalesced");
  BIGBATCH_REQUIRE(static_cast<int>(outputLists.size()) == getSize(), InvalidArgument,
                   "all_gather_coalesced into {} output list(s) on a group of {} rank(s): give "
                   "one list per rank",
                   outputLists.size(), getSize());
  std::vector<at::Tensor> flatOut;
  for (const auto& list : outputLists) {
    BIGBATCH_REQUIRE(list.size() == inputs.size(), InvalidArgument,
                     "all_gather_coalesced: an output list of {} tensor(s) for {} input(s); each "
                     "list must match the inputs",
                     list.size(), inputs.size());
    for (size_t i = 0; i < list.size(); ++i) {
      checkCpuTensor(list[i], "all_gather_coalesced");
      BIGBATCH_REQUIRE(list[i].numel() == inputs[i].numel() &&
                           list[i].scalar_type() == inputs[i].scalar_type(),
                       InvalidArgument,
                       "all_gather_coalesced: output {} holds {} {} element(s), its input {} {}",
                       i, list[i].numel(), c10::toString(list[i].scalar_type()),
                       inputs[i].numel(), c10::toString(inputs[i].scalar_type()));
      flatOut.push_back(list[i]);
    }
  }
  const CallSignature call{CollectiveKind::kAllgather, getSize(), packed.numel(),
                           static_cast<int64_t>(packed.scalar_type())};
  auto lists = outputLists;
  return enqueue(::c10d::OpType::ALLGATHER_COALESCED, "bigbatch:allgather_coalesced", flatOut,
                 call, [this, packed, lists]() mutable {
                   std::vector<at::Tensor> rows =
                       at::empty({getSize(), packed.numel()}, packed.options()).unbind(0);
                   allgatherTensor(*comm_, packed, rows);
                   for (size_t r = 0; r < lists.size(); ++r) unpackTensors(rows[r], lists[r]);
                 });
}

#if TORCH_VERSION_MAJOR >= 2
c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::allgather_into_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::AllgatherOptions&) {
  const char* op = "all_gather_into_tensor (coalesced)";
  BIGBATCH_REQUIRE(outputs.size() == inputs.size(), InvalidArgument,
                   "{}: {} output(s) for {} input(s)", op, outputs.size(), inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuTensor(inputs[i], op);
    checkCpuTensor(outputs[i], op);
    BIGBATCH_REQUIRE(outputs[i].numel() == inputs[i].numel() * getSize() &&
                         outputs[i].scalar_type() == inputs[i].scalar_type(),
                     InvalidArgument,
                     "{}: output {} must hold {} x {} elements (ranks x input) of the input's "
                     "type; it has {}",
                     op, i, getSize(), inputs[i].numel(), outputs[i].numel());
  }
  at::Tensor packed = packTensors(inputs, op);
  const CallSignature call{CollectiveKind::kAllgather, getSize(), packed.numel(),
                           static_cast<int64_t>(packed.scalar_type())};
  std::vector<at::Tensor> outs = outputs, ins = inputs;
  return enqueue(::c10d::OpType::_ALLGATHER_BASE, "bigbatch:allgather_into_tensor_coalesced", outs,
                 call, [this, packed, outs, ins]() mutable {
                   const int n = getSize();
                   // [rank][every input, packed], filled in place through its rows
                   const at::Tensor all = at::empty({n, packed.numel()}, packed.options());
                   std::vector<at::Tensor> rows = all.unbind(0);
                   allgatherTensor(*comm_, packed, rows);
                   int64_t offset = 0;
                   for (size_t i = 0; i < outs.size(); ++i) {
                     const int64_t m = ins[i].numel();
                     outs[i].copy_(all.narrow(1, offset, m).reshape(outs[i].sizes()));
                     offset += m;
                   }
                 });
}

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::reduce_scatter_tensor_coalesced(
    std::vector<at::Tensor>& outputs, std::vector<at::Tensor>& inputs,
    const ::c10d::ReduceScatterOptions& opts) {
  const char* op = "reduce_scatter_tensor (coalesced)";
  BIGBATCH_REQUIRE(outputs.size() == inputs.size() && !inputs.empty(), InvalidArgument,
                   "{}: {} output(s) for {} input(s)", op, outputs.size(), inputs.size());
  const int n = getSize();
  std::vector<at::Tensor> columns;  // input i as [rank][its chunk]
  for (size_t i = 0; i < inputs.size(); ++i) {
    checkCpuTensor(inputs[i], op);
    checkCpuTensor(outputs[i], op);
    BIGBATCH_REQUIRE(inputs[i].numel() == outputs[i].numel() * n &&
                         inputs[i].scalar_type() == outputs[i].scalar_type() &&
                         inputs[i].scalar_type() == inputs[0].scalar_type(),
                     InvalidArgument,
                     "{}: input {} must hold {} x {} elements (ranks x output) of one type with "
                     "the others; it has {} {}",
                     op, i, n, outputs[i].numel(), inputs[i].numel(),
                     c10::toString(inputs[i].scalar_type()));
    columns.push_back(inputs[i].reshape({n, outputs[i].numel()}));
  }
  const ReduceKind kind = reduceKindOf(opts.reduceOp, op);
  checkReducible(outputs[0], kind);
  // Row r: every input's chunk for rank r, side by side — packed on the
  // caller's thread, as the script may reuse its inputs once this returns.
  const at::Tensor packed = at::cat(columns, 1);
  const CallSignature call{CollectiveKind::kReduceScatter, static_cast<int64_t>(kind),
                           packed.size(1), static_cast<int64_t>(packed.scalar_type())};
  std::vector<at::Tensor> outs = outputs;
  return enqueue(::c10d::OpType::_REDUCE_SCATTER_BASE, "bigbatch:reduce_scatter_tensor_coalesced", outs,
                 call, [this, packed, outs, kind]() mutable {
                   std::vector<at::Tensor> rows = packed.unbind(0);
                   at::Tensor mine = at::empty({packed.size(1)}, packed.options());
                   reduceScatterTensor(*comm_, rows, mine, kind);
                   unpackTensors(mine, outs);
                 });
}
#endif

c10::intrusive_ptr<::c10d::Work> ProcessGroupBigbatch::compressedAllreduce(
    at::Tensor& buffer, int codec, int64_t bucketIndex, std::vector<BucketSlot> slots) {
  checkCpuTensor(buffer, "a bigbatch comm hook's allreduce");
  BIGBATCH_REQUIRE(buffer.scalar_type() == at::kFloat && buffer.is_contiguous(), InvalidArgument,
                   "a bigbatch comm hook takes DDP's float32 buckets; this one is {} — keep the "
                   "model's parameters in float32 (AMP computes in 16 bits, the gradients stay "
                   "fp32)",
                   c10::toString(buffer.scalar_type()));
  for (const BucketSlot& s : slots) {
    BIGBATCH_REQUIRE(s.offset >= 0 && s.offset + s.numel <= buffer.numel(), InvalidArgument,
                     "a gradient at [{}, {}) lies outside its bucket of {} elements", s.offset,
                     s.offset + s.numel, buffer.numel());
  }
  codecs_.check(codec);
  const CallSignature call{CollectiveKind::kCompressedAllreduce, codec, buffer.numel(),
                           static_cast<int64_t>(buffer.scalar_type())};
  at::Tensor b = buffer;
  return enqueue(::c10d::OpType::ALLREDUCE, "bigbatch:hook_all_reduce", {b}, call,
                 [this, b, codec, bucketIndex, slots]() mutable {
                   ddp_detail::AllreduceWire wire(*comm_, *algorithm_);
                   float* data = b.data_ptr<float>();
                   // The codec leaves the mean, as DDP's hooks hand back.
                   codecs_.exchange(codec, bucketIndex, slots, data, b.numel(), wire,
                                    comm_->size());
                 });
}

}  // namespace bigbatch::torch_backend

"""bigbatch's gradient codecs as DDP communication hooks.

    import bigbatch_torch
    model = DistributedDataParallel(net)            # on the "bigbatch" group
    model.register_comm_hook(None, bigbatch_torch.hooks.fp16)
    # or
    state = bigbatch_torch.hooks.powersgd(rank=4, module=model)
    model.register_comm_hook(state, bigbatch_torch.hooks.powersgd_hook)

``fp16`` (and ``bf16``): each bucket pre-divided by the world size, sent and
summed in 16 bits by bigbatch's allreduce, widened back — bigbatch's
16-bit wire (src/ddp/half_codec.h), in one step inside the backend.

``powersgd(rank=R, ...)``: bigbatch's PowerSGD (src/ddp/powersgd_codec.h:
Vogels et al. 2019) on DDP's buckets, inside the backend — error feedback,
warm-started Q, modified Gram-Schmidt, vectors and matrices too small to
gain passed uncompressed, its factors in `wire`'s type. Its state (every
bucket's error memory and Q) is ``state.state_dict()``; a script that saves
it with its checkpoint and calls ``state.load_state_dict(...)`` on resume
continues exactly (with ``module=`` given, the state is keyed by parameter
name, whatever DDP's bucket layout: a rebuild that moves parameters between
buckets moves their state with them). The first `start_step` steps are
uncompressed (2 by default: DDP rebuilds its buckets after the first
iteration).

Every hook hands DDP the mean gradient, as PyTorch's own hooks do, written
into DDP's bucket in place: the future's value is the bucket itself. With
DDP's ``gradient_as_bucket_view=True`` the gradients are views of the
buckets, so DDP copies them neither into the buckets after backward nor
back out after the hook (docs/TORCH_BACKEND.md, "Comm hooks").
"""
import torch

__all__ = ["fp16", "bf16", "powersgd", "powersgd_hook", "PowerSGDState"]


def _backend(process_group):
    from . import backend_of
    return backend_of(process_group)


def _layout(bucket, names=None):
    """[(offset, numel, shape, name)] of each gradient in the bucket's flat
    buffer; the name is the parameter's (from `names`: id -> name), else
    its position ("#b<bucket>.<i>": the backend drops such state when DDP
    rebuilds its buckets, as it then names another tensor)."""
    buffer = bucket.buffer()
    base = buffer.data_ptr()
    size = buffer.element_size()
    params = bucket.parameters()
    out = []
    for i, (g, p) in enumerate(zip(bucket.gradients(), params)):
        name = names.get(id(p)) if names else None
        out.append(((g.data_ptr() - base) // size, g.numel(), list(g.shape),
                    name or f"#b{bucket.index()}.{i}"))
    return out


def _run(backend, codec, bucket, names=None):
    work = backend._compressed_allreduce(bucket.buffer(), codec, bucket.index(),
                                         _layout(bucket, names))
    return work.get_future().then(lambda fut: fut.value()[0])


def _wire_hook(process_group, bucket, wire):
    backend = _backend(process_group)
    # The backend keeps one codec per wire (PyTorch 2.x hands out a new
    # Python wrapper of the backend at each call: nothing keyed here).
    return _run(backend, backend._wire_codec(wire), bucket)


def fp16(process_group, bucket):
    """DDP comm hook: the bucket on a float16 wire (state: the group, or None)."""
    return _wire_hook(process_group, bucket, "fp16")


def bf16(process_group, bucket):
    """DDP comm hook: the bucket on a bfloat16 wire (state: the group, or None)."""
    return _wire_hook(process_group, bucket, "bf16")


class PowerSGDState:
    """What survives a step of bigbatch's PowerSGD hook: its codecs, in the
    backend; state_dict() / load_state_dict() carry them in a checkpoint."""

    def __init__(self, process_group=None, rank=4, start_step=2, error_feedback=True,
                 warm_start=True, wire="fp32", min_compression_rate=2.0, module=None):
        if rank < 1:
            raise ValueError(f"PowerSGD rank {rank}: give 1 or more (4 is bigbatch's default)")
        if wire not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"wire {wire!r}: fp32, fp16 or bf16 (the factors' type)")
        self.process_group = process_group
        self._options = dict(wire=wire, powersgd=True, rank=rank, start_step=start_step,
                             error_feedback=error_feedback, warm_start=warm_start,
                             min_compression_rate=min_compression_rate)
        self._codec = None
        self._pending = None
        # The parameters' own names key the state: a resume is exact whatever
        # DDP's bucket layout (without the module: positions in buckets).
        self._names = None
        if module is not None:
            inner = getattr(module, "module", module)  # a DDP wrapper, or the model
            self._names = {id(p): n for n, p in inner.named_parameters()}

    def _ensure(self):
        # The backend is looked up at each call, not held: a state kept by
        # the script must not keep a destroyed group alive.
        backend = _backend(self.process_group)
        if self._codec is None:
            self._codec = backend._add_codec(**self._options)
            if self._pending is not None:
                backend._load_codec_state(self._codec, self._pending)
                self._pending = None
        return backend, self._codec

    def state_dict(self):
        """Every bucket's error memory, Q and step count: {name: CPU tensor}."""
        if self._codec is None:
            return dict(self._pending or {})
        backend, codec = self._ensure()
        return {k: v for k, v in backend._codec_state(codec).items()}

    def load_state_dict(self, state):
        """Restores what state_dict() returned (before or after the first step)."""
        if self._names is None:
            # Keyed by place in DDP's buckets, the state would be loaded into
            # the layout before DDP's rebuild (after its first iteration),
            # where those places hold other tensors.
            raise ValueError("load_state_dict needs the state keyed by parameter name: make it "
                             "with bigbatch_torch.hooks.powersgd(..., module=model)")
        state = {k: v.cpu() for k, v in state.items()}
        if self._codec is None:
            self._pending = state
        else:
            _backend(self.process_group)._load_codec_state(self._codec, state)


def powersgd(process_group=None, rank=4, start_step=2, error_feedback=True, warm_start=True,
             wire="fp32", min_compression_rate=2.0, module=None):
    """The state of bigbatch's PowerSGD hook; register it with powersgd_hook.
    Give `module` (the model, or its DDP wrapper) for a state keyed by
    parameter name, which resumes exactly whatever DDP's bucketing."""
    return PowerSGDState(process_group, rank, start_step, error_feedback, warm_start, wire,
                         min_compression_rate, module)


def powersgd_hook(state, bucket):
    """DDP comm hook: the bucket through bigbatch's PowerSGD (state: powersgd(...))."""
    if not isinstance(state, PowerSGDState):
        raise TypeError("powersgd_hook's state is bigbatch_torch.hooks.powersgd(rank=...)")
    backend, codec = state._ensure()
    return _run(backend, codec, bucket, state._names)

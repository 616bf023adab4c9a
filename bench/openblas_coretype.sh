# Sourced by the bench scripts that run PyTorch beside bigbatch
# (torch_backend_bench.sh, horovod_bench.sh): OpenBLAS picks its kernels
# from the CPU's model, and on a virtual CPU it does not know it falls back
# to its oldest x86-64 kernels (Prescott: SSE3) — on the 2-core Xeon guest
# the 26 M model's step went from 0.32 to 0.45 s. Unless OPENBLAS_CORETYPE
# is set, this sets it from the CPU's flags when OpenBLAS reports Prescott
# (SkylakeX with AVX-512, Haswell with AVX2), exports it for every side,
# and prints the choice on stderr.
if [ -z "${OPENBLAS_CORETYPE:-}" ]; then
  core=$(OPENBLAS_VERBOSE=2 /usr/bin/python3 -c 'import torch; torch.mm(torch.ones(8, 8), torch.ones(8, 8))' \
           2>&1 | sed -n 's/^Core: //p' | head -1)
  if [ "$core" = Prescott ]; then
    if grep -qw avx512f /proc/cpuinfo; then export OPENBLAS_CORETYPE=SkylakeX
    elif grep -qw avx2 /proc/cpuinfo; then export OPENBLAS_CORETYPE=Haswell; fi
  fi
fi
echo "OpenBLAS kernels: ${OPENBLAS_CORETYPE:-as OpenBLAS detects them (${core:-unknown})}" >&2

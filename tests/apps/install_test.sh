#!/bin/bash
# bigbatch as a user installs it, used from outside the repository:
#   1. `cmake --install BUILD --prefix P`: P/bin/bigbatch says the VERSION
#      file's version, trains an installed recipe on 2 workers from another
#      directory (its ranks started by mpirun from the installed binary),
#      and P's Python package imports, has the same __version__, and runs
#      the installed torch_ddp example on 2 ranks; a package whose _C was
#      built for another PyTorch is refused at import, naming both versions;
#   2. `pip install --no-build-isolation REPO/python` into a fresh virtual
#      environment (PyTorch: Debian's, seen through --system-site-packages):
#      the venv's interpreter imports it from its site-packages, at the same
#      version, and runs the example on 2 ranks. pip builds the module in
#      BUILD_DIR as it is configured (BIGBATCH_BUILD_CONFIGURED=1: for the
#      same PyTorch, so nothing to compile), not in a folder of its own:
#      that build compiled the backend's 66 translation units a second time
#      in every CI run (513 s of compiling, ~4 min of 2 cores, on a 2-core
#      Xeon guest, 2026-12-07). pip's configure-and-build path is what
#      scripts/setup-torch2 runs for PyTorch 2.x in every CI run (in a
#      folder of its own, build-torch2/build); a BUILD_DIR that is not
#      configured is refused.
#   install_test.sh BUILD_DIR
set -u
build=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
dir=$(mktemp -d)
fail() { echo "FAIL: $*"; for f in "$dir"/*.log; do [ -f "$f" ] && { echo "== $f"; tail -30 "$f"; }; done; exit 1; }
trap 'rm -rf "$dir"' EXIT
version=$(head -1 "$root/VERSION")
mpi=(mpirun --allow-run-as-root -np 2)
py=/usr/bin/python3

# 1. cmake --install
prefix=$dir/prefix
cmake --install "$build" --prefix "$prefix" >"$dir/install.log" 2>&1 || fail "cmake --install failed"
cd "$dir"  # from here on, nothing is run from the repository
[ "$("$prefix/bin/bigbatch" --version)" = "bigbatch $version" ] ||
  fail "installed bigbatch --version says '$("$prefix/bin/bigbatch" --version)', not 'bigbatch $version'"
for f in share/bigbatch/configs/fast.toml share/bigbatch/examples/torch_ddp/train.py \
         share/bigbatch/examples/slurm/train.sbatch share/doc/bigbatch/LICENSE \
         share/doc/bigbatch/CHANGELOG.md; do
  [ -f "$prefix/$f" ] || fail "cmake --install did not install $f"
done
grep -q "^## $version " "$prefix/share/doc/bigbatch/CHANGELOG.md" ||
  fail "CHANGELOG.md has no section for $version"
"$prefix/bin/bigbatch" train "$prefix/share/bigbatch/configs/fast.toml" --workers 2 \
  --set data.train_samples=1024 --set data.eval_samples=500 --set train.epochs=1 \
  --run-dir run >"$dir/train.log" 2>&1 || fail "the installed bigbatch did not train"
[ -f run/summary.json ] && [ -f run/model.pt ] || fail "the installed bigbatch's run wrote no summary.json or model.pt"

site=$(find "$prefix" -type d -name bigbatch_torch -path '*-packages/*' | head -1)
[ -n "$site" ] || fail "cmake --install installed no Python package bigbatch_torch"
site=$(dirname "$site")
got=$(PYTHONPATH=$site $py -c 'import bigbatch_torch as b; print(b.__version__, b.__file__)') ||
  fail "the installed bigbatch_torch does not import"
[ "$got" = "$version $site/bigbatch_torch/__init__.py" ] || fail "installed import gave '$got'"
"${mpi[@]}" -x PYTHONPATH="$site" $py "$prefix/share/bigbatch/examples/torch_ddp/train.py" \
  --backend bigbatch --steps 5 >"$dir/ddp.log" 2>&1 || fail "the installed torch_ddp example failed"
grep -q "^stopped after step 5 (--steps)  loss [0-9.]*  [0-9]* img/s" "$dir/ddp.log" ||
  fail "the installed torch_ddp example did not say what it did"

# Built for another PyTorch: refused at import, naming both versions.
sed -i 's/^torch_version = .*/torch_version = "9.9.0"/' "$site/bigbatch_torch/_version.py"
PYTHONPATH=$site $py -c 'import bigbatch_torch' >"$dir/mismatch.log" 2>&1 &&
  fail "a package built for PyTorch 9.9.0 imported"
grep -q "ImportError: bigbatch_torch was built against PyTorch 9.9.0, but this interpreter .* imports PyTorch 1\.13" \
  "$dir/mismatch.log" || fail "the import under another PyTorch did not name both versions"

# 2. pip install into a fresh virtual environment
$py -m venv --system-site-packages "$dir/venv" >"$dir/venv.log" 2>&1 || fail "python3 -m venv failed"
BIGBATCH_BUILD_DIR=$dir/none BIGBATCH_BUILD_CONFIGURED=1 "$dir/venv/bin/pip" install \
  --no-build-isolation --no-index "$root/python" >"$dir/pip-none.log" 2>&1 &&
  fail "pip install with BIGBATCH_BUILD_CONFIGURED=1 into a folder with no build passed"
grep -q "BIGBATCH_BUILD_CONFIGURED=1, but $dir/none is not a configured CMake build" "$dir/pip-none.log" ||
  fail "pip install into a folder with no build did not say so"
"$dir/venv/bin/python" -c 'import bigbatch_torch' 2>/dev/null && fail "a refused pip install left a package"
BIGBATCH_BUILD_DIR=$build BIGBATCH_BUILD_CONFIGURED=1 "$dir/venv/bin/pip" install --no-build-isolation \
  --no-index "$root/python" >"$dir/pip.log" 2>&1 || fail "pip install --no-build-isolation $root/python failed"
got=$("$dir/venv/bin/python" -c 'import bigbatch_torch as b; print(b.__version__, b.__file__)') ||
  fail "the pip-installed bigbatch_torch does not import"
case $got in
  "$version $dir/venv/lib/python"*"/site-packages/bigbatch_torch/__init__.py") ;;
  *) fail "the venv's import gave '$got', not version $version from its site-packages" ;;
esac
"${mpi[@]}" "$dir/venv/bin/python" "$prefix/share/bigbatch/examples/torch_ddp/train.py" \
  --backend bigbatch --steps 5 >"$dir/ddp-pip.log" 2>&1 || fail "the torch_ddp example failed under the venv"
grep -q "^stopped after step 5 (--steps)" "$dir/ddp-pip.log" || fail "the example under the venv did not finish"
echo "install_test: ok (bigbatch $version: cmake --install and pip install)"

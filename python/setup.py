"""`pip install --no-build-isolation ./python`: bigbatch_torch, the
torch.distributed backend "bigbatch", built against the PyTorch of the
environment pip runs in — Debian's python3-torch (1.13) or a PyTorch 2.x
wheel — as `pip install horovod` builds against the installed framework.

--no-build-isolation: the build needs the environment's own torch (its C++
headers, its libtorch); an isolated build environment would not have it,
or would fetch another. The C++ core comes from the repository around this
folder, built by its CMake (only the backend's targets, with this
interpreter and this torch), so the machine needs what scripts/setup
installs (a compiler, CMake, Open MPI, the header libraries). Knobs (the
environment): BIGBATCH_BUILD_DIR (default: build-python/<interpreter>-torch<version>
beside this folder, kept between builds so a second install is quick),
BIGBATCH_BUILD_JOBS (default: the cores), CMAKE_ARGS (more -D options),
BIGBATCH_BUILD_CONFIGURED=1 (BIGBATCH_BUILD_DIR is a build already
configured against this PyTorch, the project's own build/ say: the module is
built there as configured, not reconfigured with this file's options, which
would turn that build's tests off, nor with CMAKE_ARGS; the module must be
for this torch).
"""
import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
VERSION = (ROOT / "VERSION").read_text().strip()


class CMakeExtension(Extension):
    """The backend's _C module, made by the repository's CMake."""

    def __init__(self):
        super().__init__("bigbatch_torch._C", sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        try:
            import torch
        except ImportError as e:
            sys.exit(f"bigbatch_torch: this environment has no PyTorch ({e}): install torch first, "
                     "then `pip install --no-build-isolation ./python`")
        version = torch.__version__.split("+")[0]
        tag = f"py{sys.version_info[0]}{sys.version_info[1]}-torch{version}"
        build = Path(os.environ.get("BIGBATCH_BUILD_DIR", ROOT / "build-python" / tag))
        jobs = os.environ.get("BIGBATCH_BUILD_JOBS", str(os.cpu_count() or 1))
        configure = [
            "cmake", "-S", str(ROOT), "-B", str(build), "-DCMAKE_BUILD_TYPE=Release",
            "-DBIGBATCH_BUILD_TESTS=OFF", f"-DPython3_EXECUTABLE={sys.executable}",
            f"-DCMAKE_PREFIX_PATH={torch.utils.cmake_prefix_path}",
        ] + os.environ.get("CMAKE_ARGS", "").split()
        if shutil.which("ninja"):
            configure += ["-G", "Ninja"] if not (build / "CMakeCache.txt").exists() else []
        if os.environ.get("BIGBATCH_BUILD_CONFIGURED") == "1":
            if not (build / "CMakeCache.txt").exists():
                sys.exit(f"bigbatch_torch: BIGBATCH_BUILD_CONFIGURED=1, but {build} is not a configured "
                         "CMake build (no CMakeCache.txt): name one (scripts/build makes build/), "
                         "or unset BIGBATCH_BUILD_CONFIGURED")
        else:
            subprocess.run(configure, check=True)
        subprocess.run(["cmake", "--build", str(build), "--target", "bigbatch_torch", "-j", jobs],
                       check=True)
        built = build / "python" / "bigbatch_torch"
        modules = sorted(built.glob("_C*.so"))
        if not modules:
            sys.exit(f"bigbatch_torch: CMake built no _C module in {built}: its configure step "
                     "says why (`bigbatch: the torch.distributed backend ... is not built: ...`)")
        built_for = {}
        exec((built / "_version.py").read_text(), built_for)
        if built_for["torch_version"].split(".")[:2] != version.split(".")[:2]:
            sys.exit(f"bigbatch_torch: {build} builds for PyTorch {built_for['torch_version']}, but "
                     f"this environment has PyTorch {version}: build in a folder of its own "
                     "(unset BIGBATCH_BUILD_DIR and BIGBATCH_BUILD_CONFIGURED)")
        target = Path(self.get_ext_fullpath(ext.name))
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(modules[-1], target)
        # The version file CMake wrote (the project's, and the torch it is for).
        shutil.copy2(built / "_version.py", target.parent / "_version.py")


setup(
    name="bigbatch-torch",
    version=VERSION,
    description="bigbatch's gradient exchange as a torch.distributed backend and DDP comm hooks",
    long_description=(ROOT / "docs" / "TORCH_BACKEND.md").read_text(),
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    packages=["bigbatch_torch"],
    package_dir={"bigbatch_torch": "bigbatch_torch"},
    ext_modules=[CMakeExtension()],
    cmdclass={"build_ext": CMakeBuild},
    python_requires=">=3.9",
    zip_safe=False,
)

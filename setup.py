"""Builds libkvtier.so into the kvtier package (see pyproject.toml).

The library comes from $KVTIER_LIB_DIR when set (a CMake build's lib/ folder),
else from a CMake build of just the library in build/python-lib. It is
copied into the package as kvtier/libkvtier.so, the first place
kvtier._lib looks, so an installed package needs neither KVTIER_LIB nor
LD_LIBRARY_PATH. RocksDB, liburing, xxHash and zstd stay Debian's shared
libraries.
"""
import glob
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
PKG_BUILD = os.path.join("build", "python-package")  # beside CMake's build tree, not in it
os.makedirs(os.path.join(HERE, PKG_BUILD), exist_ok=True)


def _library():
    lib_dir = os.environ.get("KVTIER_LIB_DIR")
    if not lib_dir:
        build = os.path.join(HERE, "build", "python-lib")
        subprocess.check_call(["cmake", "-S", HERE, "-B", build, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
                               "-DKVTIER_BUILD_TESTS=OFF", "-DKVTIER_BUILD_BENCH=OFF"])
        subprocess.check_call(["cmake", "--build", build, "--target", "kvtier", "-j", str(os.cpu_count() or 2)])
        lib_dir = os.path.join(build, "lib")
    real = [p for p in sorted(glob.glob(os.path.join(lib_dir, "libkvtier.so*"))) if not os.path.islink(p)]
    if not real:
        raise RuntimeError(f"no libkvtier.so in {lib_dir}")
    return real[0]


class BuildPyWithLibrary(build_py):
    def run(self):
        super().run()
        dest = os.path.join(self.build_lib, "kvtier", "libkvtier.so")
        shutil.copyfile(_library(), dest)
        os.chmod(dest, 0o755)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # the wheel carries a native library: tag it for this platform
        return True


setup(cmdclass={"build_py": BuildPyWithLibrary}, distclass=BinaryDistribution,
      options={"build": {"build_base": PKG_BUILD}, "egg_info": {"egg_base": PKG_BUILD}})

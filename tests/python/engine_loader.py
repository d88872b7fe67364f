"""What the engine-source loaders (vllm_source, sglang_source, lmcache_source)
share: packages imported as plain folders, and stand-in modules."""
import importlib.abc
import importlib.machinery
import os
import sys
import types


class FolderPackages(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the packages `names` of the checkout at `src` as plain folders:
    their __init__ (which imports the whole engine) does not run, and their
    modules are imported one by one as used."""

    def __init__(self, src, names):
        self._src = src
        self._names = frozenset(names)

    def find_spec(self, name, path=None, target=None):
        if name not in self._names:
            return None
        spec = importlib.machinery.ModuleSpec(name, self, is_package=True)
        spec.submodule_search_locations = [os.path.join(self._src, *name.split("."))]
        return spec

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        pass


def stub_module(name, **attrs):
    """Puts a module `name` holding `attrs` in sys.modules, and returns it."""
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m

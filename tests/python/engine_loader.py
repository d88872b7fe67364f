"""What the engine-source loaders (vllm_source, sglang_source, lmcache_source)
share: packages imported as plain folders, and stand-in modules."""
import dataclasses
import enum
import importlib.abc
import importlib.machinery
import json
import os
import subprocess
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


def stand_in_module(name, **attrs):
    """Puts a module `name` holding `attrs` in sys.modules, and returns it."""
    m = types.ModuleType(name)
    m.__dict__.update(attrs)
    sys.modules[name] = m
    return m


def describe_type(o):
    """What a stand-in must match of an engine's dataclass or enum: its init
    fields and which are required, their defaults, frozenness, members."""
    d = {}
    if dataclasses.is_dataclass(o):
        d["fields"] = {f.name: (f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING)
                       for f in dataclasses.fields(o) if f.init}
        d["defaults"] = {f.name: repr(f.default) for f in dataclasses.fields(o)
                         if f.init and f.default is not dataclasses.MISSING}
        d["frozen"] = o.__dataclass_params__.frozen
    if isinstance(o, type) and issubclass(o, tuple) and hasattr(o, "_fields"):  # a NamedTuple
        d["fields"] = {f: f not in o._field_defaults for f in o._fields}
        d["defaults"] = {f: repr(v) for f, v in o._field_defaults.items()}
        d["frozen"] = True  # a tuple
    if isinstance(o, type) and issubclass(o, enum.Enum):
        d["members"] = {k: repr(v.value) for k, v in o.__members__.items()}
    return d


def describe_in_child(code, mode, src, here, timeout=300):
    """Runs `code` (which prints one JSON object last) in a fresh interpreter
    with MODE, SRC and HERE set: the real engine and CI's stand-ins share
    module names, so each is described in a process of its own."""
    prelude = f"MODE = {mode!r}; SRC = {src!r}; HERE = {here!r}\n"
    env = dict(os.environ, PYTHONPATH=here)
    r = subprocess.run([sys.executable, "-c", prelude + code], capture_output=True, text=True, env=env,
                       timeout=timeout)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])

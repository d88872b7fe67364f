"""Stand-in for l2_adapters/base.py: L2AdapterInterface, its abstract
methods and the byte accounting its helpers keep (test_lmcache_standins.py
compares it with LMCache's)."""
import abc
import threading
from dataclasses import dataclass, field
from types import MappingProxyType


@dataclass(frozen=True)
class AdapterUsage:
    total_bytes_used: int
    total_capacity_bytes: int
    bytes_by_cache_salt: dict = field(default_factory=lambda: MappingProxyType({}))


class L2AdapterInterface(abc.ABC):
    def __init__(self, max_capacity_bytes=0):
        self._listeners = []
        self._max_capacity_bytes = max_capacity_bytes
        self._total_bytes_used = 0
        self._bytes_by_cache_salt = {}
        self._usage_lock = threading.Lock()

    @abc.abstractmethod
    def get_store_event_fd(self): ...

    @abc.abstractmethod
    def get_lookup_and_lock_event_fd(self): ...

    @abc.abstractmethod
    def get_load_event_fd(self): ...

    @abc.abstractmethod
    def submit_store_task(self, keys, objects): ...

    @abc.abstractmethod
    def pop_completed_store_tasks(self): ...

    @abc.abstractmethod
    def submit_lookup_and_lock_task(self, keys): ...

    @abc.abstractmethod
    def query_lookup_and_lock_result(self, task_id): ...

    @abc.abstractmethod
    def submit_unlock(self, keys): ...

    @abc.abstractmethod
    def submit_load_task(self, keys, objects): ...

    @abc.abstractmethod
    def query_load_result(self, task_id): ...

    @abc.abstractmethod
    def close(self): ...

    def register_listener(self, listener):
        self._listeners.append(listener)

    def _account(self, keys, sizes, sign):
        with self._usage_lock:
            for key, size in zip(keys, sizes, strict=True):
                left = self._bytes_by_cache_salt.get(key.cache_salt, 0) + sign * size
                if left > 0:
                    self._bytes_by_cache_salt[key.cache_salt] = left
                else:
                    self._bytes_by_cache_salt.pop(key.cache_salt, None)
                self._total_bytes_used = max(0, self._total_bytes_used + sign * size)

    def _notify_keys_stored(self, keys, sizes):
        self._account(keys, sizes, 1)
        for listener in self._listeners:
            listener.on_l2_keys_stored(keys, sizes)

    def _notify_keys_accessed(self, keys):
        for listener in self._listeners:
            listener.on_l2_keys_accessed(keys)

    def _notify_keys_deleted(self, keys, sizes):
        self._account(keys, sizes, -1)
        for listener in self._listeners:
            listener.on_l2_keys_deleted(keys)

    @property
    def supports_global_eviction(self):
        return self._max_capacity_bytes > 0

    def delete(self, keys):
        return None

    def list_l2_keys(self, model_name=None, page_size=500, cursor=None):
        raise NotImplementedError(f"{type(self).__name__} does not implement list_l2_keys")

    def get_usage(self):
        with self._usage_lock:
            return AdapterUsage(self._total_bytes_used, self._max_capacity_bytes,
                                MappingProxyType(dict(self._bytes_by_cache_salt)))

    def report_status(self):
        return {"is_healthy": True}

"""Stand-in for lmcache/v1/distributed/internal_api.py: a store task's result
and the L2 listener interface."""
import abc


class L2StoreResult(int):
    """>= 0: success, the bytes written; -1: failure."""

    def __new__(cls, success, bytes_transferred):
        if bytes_transferred < 0:
            raise ValueError(f"bytes_transferred must be >= 0, got {bytes_transferred}")
        return super().__new__(cls, bytes_transferred if success else -1)

    def is_successful(self):
        return int(self) >= 0

    def bytes_transferred(self):
        return max(int(self), 0)


class L2AdapterListener(abc.ABC):
    @abc.abstractmethod
    def on_l2_keys_stored(self, keys, sizes=None): ...

    @abc.abstractmethod
    def on_l2_keys_accessed(self, keys): ...

    @abc.abstractmethod
    def on_l2_keys_deleted(self, keys): ...

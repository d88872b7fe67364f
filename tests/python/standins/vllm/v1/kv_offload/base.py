"""Stand-in for vllm/v1/kv_offload/base.py: the types a secondary tier uses."""
from dataclasses import dataclass, field
from enum import Enum, auto
from collections.abc import Collection
from typing import Any, NamedTuple, NewType

OffloadKey = NewType("OffloadKey", bytes)


def make_offload_key(block_hash: bytes, group_idx: int) -> OffloadKey:
    return OffloadKey(block_hash + group_idx.to_bytes(4, "big", signed=False))


class Medium(Enum):
    CPU = "CPU"
    STORAGE = "STORAGE"


class Locality(Enum):
    LOCAL = "LOCAL"
    REMOTE = "REMOTE"


@dataclass
class ReqContext:
    req_id: str
    kv_transfer_params: dict[str, Any] | None = None
    _state: dict = field(default_factory=dict, repr=False, init=False)


class ScheduleEndContext(NamedTuple):
    new_req_ids: Collection[str]
    preempted_req_ids: Collection[str]


class LookupResult(Enum):
    MISS = auto()
    HIT = auto()
    HIT_PENDING = auto()
    RETRY = auto()


class OffloadPolicy(Enum):
    BLOCK_LEVEL = "block_level"
    REQUEST_LEVEL = "request_level"


@dataclass
class RequestOffloadingContext:
    policy: OffloadPolicy = OffloadPolicy.BLOCK_LEVEL


@dataclass
class OffloadingEvent:
    keys: list
    medium: Medium
    removed: bool
    locality: Locality | None = None


@dataclass(frozen=True)
class OffloadingMetricMetadata:
    documentation: str
    labelnames: tuple = ()


@dataclass(frozen=True)
class OffloadingCounterMetadata(OffloadingMetricMetadata):
    pass


@dataclass(frozen=True)
class OffloadingKVEventsConfig:
    enable_kv_cache_events: bool
    self_describing_kv_events: bool

"""Stand-in for vllm/v1/kv_offload/tiering/base.py: the tier contract."""
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class TransferJob:
    job_id: int
    keys: Any
    block_ids: np.ndarray
    is_promotion: bool
    req_context: Any


@dataclass
class JobResult:
    job_id: int
    success: bool
    successful_keys: Any = None
    transfer_time: float | None = None


class SecondaryTierManager(ABC):
    medium = None

    def __init__(self, offloading_spec, primary_kv_view: memoryview, tier_type: str) -> None:
        self._offloading_spec = offloading_spec
        self._primary_kv_view = primary_kv_view
        self.tier_type = tier_type
        self.locality = None

    @abstractmethod
    def lookup(self, key, req_context): ...

    @abstractmethod
    def submit_store(self, job_metadata): ...

    @abstractmethod
    def submit_load(self, job_metadata): ...

    @abstractmethod
    def get_finished_jobs(self): ...

    def has_pending_work(self) -> bool:
        return False

    def take_events(self):
        return ()

    def touch(self, keys, req_context):
        return

    @abstractmethod
    def on_new_request(self, req_context): ...

    def on_request_finished(self, req_context) -> None:
        return

    def serve_external_requests(self, parent) -> None:
        return

    def on_schedule_end(self, context) -> None:
        return

    @abstractmethod
    def drain_jobs(self) -> None: ...

    def shutdown(self) -> None:
        return

    @classmethod
    def build_metric_definitions(cls, extra_config):
        return {}

    def get_stats(self):
        return None

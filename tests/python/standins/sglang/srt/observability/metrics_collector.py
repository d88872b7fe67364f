"""Stand-in for the StorageMetrics dataclass of
sglang/srt/observability/metrics_collector.py."""
from dataclasses import dataclass, field
from typing import List


@dataclass
class StorageMetrics:
    prefetch_pgs: List[int] = field(default_factory=list)
    backup_pgs: List[int] = field(default_factory=list)
    prefetch_bandwidth: List[float] = field(default_factory=list)
    backup_bandwidth: List[float] = field(default_factory=list)



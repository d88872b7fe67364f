"""Stand-in for the OffloadingConnector's stats container (counters only)."""
from dataclasses import dataclass, field


@dataclass
class OffloadingConnectorStats:
    data: dict = field(default_factory=dict)

    def __post_init__(self):
        if "data" not in self.data:
            self.reset()

    def reset(self):
        self.data = {"types": {}, "data": {}}

    def is_empty(self) -> bool:
        return not self.data.get("data")

    def increase_counter(self, counter_name, counter_increase_value=1, labelvalues=()):
        self.data["types"].setdefault(counter_name, "counter")
        values = self.data["data"].setdefault(counter_name, {})
        values[labelvalues] = values.get(labelvalues, 0) + counter_increase_value

    def reduce(self):
        out = {}
        for name, by_label in self.data["data"].items():
            for labels, v in by_label.items():
                out[f"{name}:{labels}" if labels else name] = v
        return out

"""Stand-in for l2_adapters/config.py: the base every adapter config class
derives from."""
import abc


class L2AdapterConfigBase(abc.ABC):
    @classmethod
    @abc.abstractmethod
    def from_dict(cls, d): ...

    @classmethod
    @abc.abstractmethod
    def help(cls): ...

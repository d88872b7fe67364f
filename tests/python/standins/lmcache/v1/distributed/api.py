"""Stand-in for lmcache/v1/distributed/api.py: the key and key-listing types
an L2 adapter uses (fields, defaults and checks as LMCache's)."""
from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectKey:
    chunk_hash: bytes
    model_name: str
    kv_rank: int
    object_group_id: int = 0
    cache_salt: str = ""

    def __post_init__(self):
        if "@" in self.model_name:
            raise ValueError(f"model_name must not contain '@' (got {self.model_name!r})")
        if self.object_group_id < 0:
            raise ValueError(f"object_group_id must be >= 0 (got {self.object_group_id})")
        if set("@/\\\x00") & set(self.cache_salt) or len(self.cache_salt) > 128:
            raise ValueError(f"bad cache_salt {self.cache_salt!r}")

    @staticmethod
    def ComputeKVRank(world_size, global_rank, local_world_size, local_rank):
        return (world_size << 24) | (global_rank << 16) | (local_world_size << 8) | local_rank


@dataclass(frozen=True)
class EncodedObjectKey:
    chunk_hash_hex: str
    model_name: str
    kv_rank: int
    object_group_id: int = 0
    cache_salt: str = ""

    def to_object_key(self):
        return ObjectKey(chunk_hash=bytes.fromhex(self.chunk_hash_hex), model_name=self.model_name,
                         kv_rank=self.kv_rank, object_group_id=self.object_group_id, cache_salt=self.cache_salt)


@dataclass(frozen=True)
class KeyEntry:
    key: EncodedObjectKey
    size_bytes: int


@dataclass(frozen=True)
class KeyListPage:
    entries: tuple
    next_page_token: "str | None"

"""Engine adapters: one module per engine, each naming the version it targets.

- kvtier.adapters.sglang: HiCacheStorage backend (SGLang HiCache L3).
- kvtier.adapters.vllm: SecondaryTierManager (vLLM offloading secondary tier).
LMCache plugs in through the C connector library libkvtier_lmcache.so.
"""

"""Stand-in for MHATokenToKVPoolHost of sglang/srt/mem_cache/memory_pool_host.py
on CPU: the same constructor, buffer shapes per layout, and the page
accessors kvtier's backend and SGLang's controller use (get_page_buffer_meta,
get_split_heads_page_buffer_meta, get_data_page, get_dummy_flat_data_page, set_from_flat_data_page, alloc,
free). test_sglang_standins.py compares their results with the real pool's."""
import threading

import torch

_DIMS = {
    "layer_first": lambda s: (2, s.layer_num, s.size, s.head_num, s.head_dim),
    "page_first": lambda s: (2, s.size, s.layer_num, s.head_num, s.head_dim),
    "page_first_direct": lambda s: (2, s.page_num, s.layer_num, s.page_size, s.head_num, s.head_dim),
    "page_head": lambda s: (2, s.page_num, s.head_num, s.page_size, s.layer_num, s.head_dim),
}


def _itemsize(dtype):  # torch.dtype.itemsize, which torch 1.13 lacks
    return torch.empty((), dtype=dtype).element_size()


class MHATokenToKVPoolHost:
    def __init__(self, device_pool, host_to_device_ratio, host_size, page_size, layout, pin_memory=True,
                 device="cpu", allocator_type="default"):
        if layout not in _DIMS:
            raise ValueError(f"Unsupported layout: {layout}")
        self.device_pool = device_pool
        self.page_size = page_size
        self.layout = layout
        self.pin_memory = pin_memory
        self.device = device
        self.dtype = device_pool.store_dtype
        self.head_num, self.head_dim, self.layer_num = device_pool.head_num, device_pool.head_dim, device_pool.layer_num
        self.size_per_token = self.head_dim * self.head_num * self.layer_num * _itemsize(self.dtype) * 2
        if host_size > 0:
            self.size = int(host_size * 1e9 // self.size_per_token)
        else:
            self.size = int(device_pool.size * host_to_device_ratio)
        self.page_num = self.size // self.page_size + 1
        self.size = self.page_num * self.page_size
        self.start_layer = device_pool.start_layer
        self.end_layer = device_pool.end_layer
        assert self.size > device_pool.size
        self.kv_buffer = torch.empty(_DIMS[layout](self), dtype=self.dtype, device=device)
        self.lock = threading.RLock()
        self.free_slots = torch.arange(self.size, dtype=torch.int64)

    def alloc(self, need_size):
        assert need_size % self.page_size == 0
        with self.lock:
            if need_size > len(self.free_slots):
                return None
            out, self.free_slots = self.free_slots[:need_size], self.free_slots[need_size:]
            return out

    def free(self, indices):
        with self.lock:
            self.free_slots = torch.cat([self.free_slots, indices.cpu()])
        return len(indices)

    def get_data_page(self, index, flat=True):
        if self.layout == "layer_first":
            page = self.kv_buffer[:, :, index:index + self.page_size, :, :]
        elif self.layout == "page_first":
            page = self.kv_buffer[:, index:index + self.page_size, :, :, :]
        else:
            page = self.kv_buffer[:, index // self.page_size:index // self.page_size + 1, :, :, :, :]
        return page.flatten() if flat else page

    def get_dummy_flat_data_page(self):
        return torch.zeros((2, self.layer_num, self.page_size, self.head_num, self.head_dim), dtype=self.dtype,
                           device=self.device).flatten()

    def set_from_flat_data_page(self, index, data_page):
        p, L, H, D = self.page_size, self.layer_num, self.head_num, self.head_dim
        if self.layout == "layer_first":
            self.kv_buffer[:, :, index:index + p, :, :] = data_page.reshape(2, L, p, H, D)
        elif self.layout == "page_first":
            self.kv_buffer[:, index:index + p, :, :, :] = data_page.reshape(2, p, L, H, D)
        elif self.layout == "page_first_direct":
            i = index // p
            self.kv_buffer[:, i:i + 1, :, :, :, :] = data_page.reshape(2, 1, L, p, H, D)
        else:
            i = index // p
            self.kv_buffer[:, i:i + 1, :, :, :, :] = data_page.reshape(2, 1, H, p, L, D)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        item = _itemsize(self.dtype)
        base = self.kv_buffer.data_ptr()
        token = self.head_num * self.head_dim * item
        v_offset = self.layer_num * self.size * token
        ptrs = []
        indices = indices.tolist()
        if self.layout == "layer_first":
            for i in range(0, len(indices), self.page_size):
                for layer in range(self.layer_num):
                    k = base + indices[i] * token + layer * self.size * token
                    ptrs += [k, k + v_offset]
            size = item * self.page_size * self.head_num * self.head_dim
        else:
            for i in range(0, len(indices), self.page_size):
                k = base + indices[i] * self.layer_num * token
                ptrs += [k, k + v_offset]
            size = self.layer_num * item * self.page_size * self.head_num * self.head_dim
        return ptrs, [size] * len(ptrs)

    def get_split_heads_page_buffer_meta(self, indices, split_factor):
        # page_head holds a page as (head, token, layer, dim) for K, then V:
        # each run of head_num / split_factor heads is one fragment.
        assert self.layout == "page_head"
        assert len(indices) % self.page_size == 0
        assert self.head_num % split_factor == 0
        item = _itemsize(self.dtype)
        heads = self.head_num // split_factor
        piece = heads * self.page_size * self.layer_num * self.head_dim * item
        page = self.head_num * self.layer_num * self.head_dim * item  # per token slot
        v_offset = self.layer_num * self.size * self.head_num * self.head_dim * item
        ptrs = []
        for i in indices.tolist()[::self.page_size]:
            for j in range(split_factor):
                k = self.kv_buffer.data_ptr() + i * page + j * piece
                ptrs += [k, k + v_offset]
        return ptrs, [piece] * len(ptrs)

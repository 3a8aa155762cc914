"""ggml's C structures and prototypes that edgespec calls through ctypes, and reading
llama.cpp's backend sampling buffers. ctypes and numpy only: llama_cpp stays in backend.py."""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np

from ..core.errors import BackendError
from ..core.sampling import Heads

DEV_CPU, DEV_GPU, DEV_IGPU = 0, 1, 2  # enum ggml_backend_dev_type
ADD_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)  # ggml_backend_rpc_add_server
START_SERVER = ctypes.CFUNCTYPE(  # ggml_backend_rpc_start_server
    None, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_size_t, ctypes.POINTER(ctypes.c_void_p)
)
RPC_REBUILD = (
    "this llama-cpp-python build has no RPC backend; `make setup` builds it with -DGGML_RPC=ON, or: "
    "CMAKE_ARGS='-DGGML_RPC=ON' pip install --force-reinstall --no-cache-dir llama-cpp-python==0.3.36"
)
_vp, _sz, _cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
GGML_PROTOTYPES: tuple[tuple[str, Any, list[Any]], ...] = (  # (name, restype, argtypes)
    ("ggml_backend_reg_by_name", _vp, [_cp]),
    ("ggml_backend_reg_get_proc_address", _vp, [_vp, _cp]),
    ("ggml_backend_register", None, [_vp]),
    ("ggml_backend_reg_dev_count", _sz, [_vp]),
    ("ggml_backend_reg_dev_get", _vp, [_vp, _sz]),
    ("ggml_backend_dev_count", _sz, []),
    ("ggml_backend_dev_get", _vp, [_sz]),
    ("ggml_backend_dev_type", ctypes.c_int, [_vp]),
    ("ggml_backend_dev_name", _cp, [_vp]),
    ("ggml_backend_dev_memory", None, [_vp, ctypes.POINTER(_sz), ctypes.POINTER(_sz)]),
)


class Feature(ctypes.Structure):  # ggml_backend_feature; a NULL name ends the list
    _fields_ = [("name", ctypes.c_char_p), ("value", ctypes.c_char_p)]


def _rows_at(get: Any, ctx: Any, first: int, n_out: int, stride: int, dtype: Any) -> np.ndarray:
    """Rows first.. of one of llama.cpp's backend sampling buffers (a row of `stride` entries per
    output, in output order): one view where they lie in a run, else a copy row by row."""
    ptrs = [get(ctx, first + i) for i in range(n_out)] if n_out <= 2 else [get(ctx, first), get(ctx, first + n_out - 1)]
    if not all(ptrs):
        raise BackendError("llama.cpp returned no backend top-k rows")
    width = np.dtype(dtype).itemsize * stride
    addr = [ctypes.cast(p, ctypes.c_void_p).value or 0 for p in ptrs]
    if addr[-1] - addr[0] == (n_out - 1) * width:
        return np.ctypeslib.as_array(ptrs[0], shape=(n_out, stride))
    return np.stack([np.ctypeslib.as_array(get(ctx, first + i), shape=(stride,)).copy() for i in range(n_out)])


def read_heads(lib: Any, ctx: Any, first: int, n_out: int, n_vocab: int, k: int) -> Heads:
    """The heads llama.cpp's backend top-k left for batch positions first..first + n_out - 1
    (`lib`: llama_cpp; its buffers hold n_vocab entries per output row, the first k filled)."""
    if any(lib.llama_get_sampled_logits_count_ith(ctx, first + i) != k for i in (0, n_out - 1)):
        raise BackendError("llama.cpp's backend top-k returned rows of another size")
    vals = _rows_at(lib.llama_get_sampled_logits_ith, ctx, first, n_out, n_vocab, np.float32)
    ids = _rows_at(lib.llama_get_sampled_candidates_ith, ctx, first, n_out, n_vocab, np.int32)
    return Heads(ids[:, :k], vals[:, :k])


def attach_top_k(lib: Any, ctx: Any, k: int) -> Any:
    """A sampler chain of llama.cpp's top-k attached to sequence 0 of `ctx` (`lib`: llama_cpp), to
    run inside each eval (backend sampling), in place of the chain attached before; None, with
    no chain attached, for k = 0 or where the device cannot run it. The caller owns the chain:
    free it once detached, or after the context."""
    if k <= 0:
        lib.llama_set_sampler(ctx, 0, None)
        return None
    chain = lib.llama_sampler_chain_init(lib.llama_sampler_chain_default_params())
    lib.llama_sampler_chain_add(chain, lib.llama_sampler_init_top_k(k))
    # llama.cpp attaches a chain its device cannot run, then hands back whole rows as "sampled"
    # and no raw logits: the sampler's name says whether it runs there ("+top-k", else "-top-k")
    if (
        lib.llama_set_sampler(ctx, 0, chain)
        and lib.llama_sampler_name(lib.llama_sampler_chain_get(chain, 0))[:1] == b"+"
    ):
        return chain
    lib.llama_set_sampler(ctx, 0, None)
    lib.llama_sampler_free(chain)
    return None

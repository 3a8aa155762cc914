"""The only module that imports llama_cpp: one GGUF model in one llama.cpp context.

`LlamaModel` is thin. It owns the model, context and batch and frees them in
reverse order, turns every failing return code into a `BackendError`, and
exposes just what the decoder needs (the `Model` protocol in core/model.py):
eval a run of tokens at a position with logits on chosen rows, trim the cache,
tokenize, turn a token into bytes, end-of-generation facts.

Logits come back as a numpy *view* of llama.cpp's own buffer, shape (n_rows, n_vocab), or
after `set_head(k)` their top-k (`Heads`): no copy, valid until the next eval on the context.
"""

from __future__ import annotations

import ctypes
import functools
import itertools
import logging
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import llama_cpp
import numpy as np

from ..core import defaults
from ..core.errors import BackendError, ModelFileError
from ..core.sampling import Rows
from . import native_log
from .config import default_threads
from .ggml_types import QUANTIZE_FTYPES
from .native_abi import (
    ADD_SERVER,
    DEV_CPU,
    DEV_GPU,
    DEV_IGPU,
    GGML_PROTOTYPES,
    RPC_REBUILD,
    START_SERVER,
    Feature,
    attach_top_k,
    read_heads,
)

log = logging.getLogger("edgespec.llama")
_init_lock = threading.Lock()
_initialised = False
_gpu_warned = False


def _init() -> None:
    global _initialised
    with _init_lock:
        if not _initialised:
            native_log.quiet_aborts()
            llama_cpp.llama_log_set(native_log.log_callback, ctypes.c_void_p(0))
            llama_cpp.llama_backend_init()
            _initialised = True


def supports_gpu_offload() -> bool:
    """This build can offload to a GPU of this machine (llama.cpp's own answer also counts
    RPC servers, which say nothing about this machine)."""
    _init()
    return bool(llama_cpp.llama_supports_gpu_offload()) and bool(local_devices())


def gpu_fallback_warning(n_gpu_layers: int) -> str | None:
    """The one-time message when offload is asked of a CPU-only build."""
    global _gpu_warned
    if n_gpu_layers <= 0 or supports_gpu_offload() or _gpu_warned:
        return None
    _gpu_warned = True
    return (
        "this llama-cpp-python build has no GPU offload, running on the CPU; rebuild it with "
        "CMAKE_ARGS='-DGGML_CUDA=on -DGGML_RPC=ON' (NVIDIA) or '-DGGML_METAL=on -DGGML_RPC=ON' (Apple): "
        "CMAKE_ARGS=... pip install --force-reinstall --no-deps --no-cache-dir llama-cpp-python==0.3.36"
    )


class LlamaModel:
    """One model with one context (one sequence)."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_ctx: int = 4096,
        n_gpu_layers: int = 0,
        threads: int | None = None,
        n_batch: int = 512,
        devices: Sequence[int] | None = None,
        heads: bool | None = None,
    ) -> None:
        """`devices`: the ggml devices (from `rpc_devices`, `local_gpu_devices`) the layers may
        go to; None: every device llama.cpp knows. `heads`: whether `set_head` may ask for rows'
        top-k; None: where layers run on a GPU (on the CPU it gained nothing on the demo pair)."""
        _init()
        self.path, path_bytes = str(path), bytes(Path(path))  # a name that is not UTF-8 too
        self._model = self._ctx = self._batch = None
        self._head_k, self._chain = 0, None  # set_head: rows as heads of k, by this sampler chain
        mparams = llama_cpp.llama_model_default_params()
        mparams.n_gpu_layers = n_gpu_layers
        if devices is None and _rpc_registered:
            devices = local_devices()  # RPC servers registered for another model are not this one's
        if devices is not None:  # a NULL-terminated list, kept alive as long as the model
            self._devices = (ctypes.c_void_p * (len(devices) + 1))(*devices, None)
            mparams.devices = ctypes.cast(self._devices, ctypes.c_void_p)
        # Weights repacked as llama.cpp's tools do (a Q4_0 model's 16-token verify 25-40% faster on AVX2),
        # but not with AMX: this llama.cpp's AMX matmul segfaults on batches of over one token.
        mparams.use_extra_bufts = "AMX_INT8" not in cpu_features()
        native_log.begin_load()  # (nothing may raise from here to raise_if_interrupted: the SIGINT flag)
        self._model = llama_cpp.llama_model_load_from_file(path_bytes, mparams)
        if not self._model:
            native_log.raise_if_interrupted()
            why = native_log.first_error().partition("error loading model: ")[2][:200]
            fix = "if the file is damaged or older than edgespec's llama.cpp, re-download or convert it again"
            raise ModelFileError(f"llama.cpp could not load {self.path}: {why or 'not a complete GGUF model'}; {fix}")
        self.n_gpu_layers = n_gpu_layers if supports_gpu_offload() or devices else 0
        threads = threads or default_threads()
        n_ctx_train = llama_cpp.llama_model_n_ctx_train(self._model)
        cparams = llama_cpp.llama_context_default_params()
        cparams.n_ctx = min(n_ctx, n_ctx_train) if n_ctx_train > 0 else n_ctx
        cparams.n_batch = cparams.n_ubatch = n_batch
        cparams.n_seq_max, cparams.no_perf = 1, True
        cparams.n_threads = cparams.n_threads_batch = threads
        cparams.n_outputs_max = self.rows_max = min(n_batch, defaults.ROWS_MAX)
        cparams.n_outputs_max_per_seq = 0  # set_head: a backend top-k on every row of an eval
        self._ctx = llama_cpp.llama_init_from_model(self._model, cparams)
        try:
            native_log.raise_if_interrupted()  # a Ctrl-C during the load, which ctypes kept from us
        except KeyboardInterrupt:
            self.close()
            raise
        if not self._ctx:
            self.close()
            raise BackendError(
                f"llama.cpp could not create a context of {n_ctx} tokens for {self.path}; try a smaller --n-ctx"
            )
        self.threads = threads
        self.heads = bool(self.n_gpu_layers) if heads is None else heads
        self.n_ctx = int(llama_cpp.llama_n_ctx(self._ctx))
        # llama.cpp may round n_ctx up and clamp n_batch to it: use what it settled on
        self.n_batch = min(n_batch, int(llama_cpp.llama_n_batch(self._ctx)), int(llama_cpp.llama_n_ubatch(self._ctx)))
        self._vocab = llama_cpp.llama_model_get_vocab(self._model)
        self.n_vocab = int(llama_cpp.llama_vocab_n_tokens(self._vocab))
        self._mem = llama_cpp.llama_get_memory(self._ctx)
        self._batch = llama_cpp.llama_batch_init(n_batch, 0, 1)
        self._eog = np.array([bool(llama_cpp.llama_vocab_is_eog(self._vocab, t)) for t in range(self.n_vocab)])
        self.add_bos = bool(llama_cpp.llama_vocab_get_add_bos(self._vocab))
        self.bos_id = int(llama_cpp.llama_vocab_bos(self._vocab))
        self.eos_id = int(llama_cpp.llama_vocab_eos(self._vocab))
        self._grammar_tokenizer: Any = None

    # -- lifetimes -------------------------------------------------------------
    @property
    def loaded(self) -> bool:
        return bool(self._model)

    def close(self) -> None:
        """Free batch, then context, then model (the context refers to the model)."""
        if self._batch is not None:
            llama_cpp.llama_batch_free(self._batch)
            self._batch = None
        if self._ctx:
            llama_cpp.llama_free(self._ctx)
            self._ctx = None
        if self._chain is not None:  # after the context that used it
            llama_cpp.llama_sampler_free(self._chain)
            self._chain = None
        if self._model:
            llama_cpp.llama_model_free(self._model)
            self._model = None

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: llama_cpp may already be gone
            pass

    # -- evaluation ------------------------------------------------------------
    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> Rows:
        """Decode `tokens` at positions pos.. and return logits rows for tokens[logits_from:]
        (None: none, an empty array), at most `rows_max` of them. Longer runs are split into
        n_batch chunks, the last one holding every row."""
        n = len(tokens)
        if n == 0:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        if pos + n > self.n_ctx:
            raise BackendError(f"internal: eval past the context ({pos + n} > {self.n_ctx})")
        if logits_from is not None and n - logits_from > self.rows_max:  # llama.cpp would abort
            raise BackendError(f"internal: {n - logits_from} logits rows asked of one eval (at most {self.rows_max})")
        start = n_out = last = 0
        tail = max(0, n - self.n_batch)  # the last chunk is tokens[tail:]: every row asked for
        while start < n:
            end = min(tail if start < tail else n, start + self.n_batch)
            n_out = self._decode(tokens, start, end, pos, logits_from)
            start, last = end, end - start
        if logits_from is None:
            return np.empty((0, self.n_vocab), dtype=np.float32)
        if self._head_k:  # the rows of the last chunk's last n_out tokens, as set_head asked
            return read_heads(llama_cpp, self._ctx, last - n_out, n_out, self.n_vocab, self._head_k)
        ptr = llama_cpp.llama_get_logits(self._ctx)
        if not ptr:
            raise BackendError("llama.cpp returned no logits")
        return np.ctypeslib.as_array(ptr, shape=(n_out, self.n_vocab))

    def set_head(self, k: int) -> bool:
        """Return rows as their k largest logits (`Heads`, by llama.cpp's backend top-k, inside
        the eval) from now on; 0: whole rows. Whether rows come as asked (not where `heads` is off
        or the backend cannot: then whole)."""
        want = max(0, min(k, self.n_vocab)) if self.heads else 0
        if want != self._head_k:  # the old chain is detached, a new one attached where it can run
            chain = attach_top_k(llama_cpp, self._ctx, want)
            if self._chain is not None:
                llama_cpp.llama_sampler_free(self._chain)
            self._chain, self._head_k = chain, (want if chain is not None else 0)
        return self._head_k == max(0, k)

    def _decode(self, tokens: Sequence[int], start: int, end: int, pos: int, logits_from: int | None) -> int:
        b = self._batch
        assert b is not None, "model is closed"
        n_out = 0
        for j, i in enumerate(range(start, end)):
            b.token[j], b.pos[j], b.n_seq_id[j], b.seq_id[j][0] = tokens[i], pos + i, 1, 0
            out = logits_from is not None and i >= logits_from
            b.logits[j] = out
            n_out += out
        b.n_tokens = end - start
        rc = llama_cpp.llama_decode(self._ctx, b)
        if rc != 0:
            raise BackendError(
                f"llama_decode failed with code {rc} at position {pos + start} "
                f"({'no free KV slot: the context is full' if rc == 1 else 'see --verbose'})"
            )
        return n_out

    def trim(self, n_keep: int) -> None:
        """Drop every cached position >= n_keep (none once closed: a stream left open at exit restores here)."""
        if self._ctx is not None and not llama_cpp.llama_memory_seq_rm(self._mem, 0, n_keep, -1):
            raise BackendError(
                f"{Path(self.path).name}: this model's cache cannot be cut back (recurrent or hybrid "
                "architecture), so it cannot be used for speculation; run it with --no-spec"
            )

    # -- vocabulary --------------------------------------------------------------
    def is_eog(self, token: int) -> bool:
        return bool(self._eog[token])

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        data = text.encode("utf-8")
        cap = len(data) + 16
        for _ in range(2):  # a second time with the room it asked for
            buf = (llama_cpp.llama_token * cap)()
            n = llama_cpp.llama_tokenize(self._vocab, data, len(data), buf, cap, add_special, parse_special)
            if n >= 0:
                return list(buf[:n])
            cap = -n
        raise BackendError("tokenization failed")

    def piece(self, token: int, special: bool = False) -> bytes:
        buf = ctypes.create_string_buffer(64)  # per call: frontends may call this from other threads
        n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, 64, 0, special)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, special)
        return buf.raw[:n]

    def token_text(self, token: int) -> str:
        return self.piece(token, special=True).decode("utf-8", "replace")

    def chat_template(self) -> str | None:
        ptr = llama_cpp.llama_model_chat_template(self._model, None)
        return ptr.decode("utf-8", "replace") if ptr else None

    def grammar_tokenizer(self) -> Any:
        """llguidance's tokenizer over this model's vocabulary (for structured output), built
        once on first use (about half a second for a 49k vocabulary)."""
        if self._grammar_tokenizer is None:
            import llguidance.llamacpp

            with warnings.catch_warnings():  # it asks llama_token_get_attr, deprecated, once per token
                warnings.simplefilter("ignore", DeprecationWarning)
                self._grammar_tokenizer = llguidance.llamacpp.lltokenizer_from_vocab(self._vocab)
        return self._grammar_tokenizer


def quantize(src: str | Path, dst: str | Path, qtype: str, threads: int | None = None) -> None:
    """Write `src` re-encoded as `qtype` (llama.cpp's quantizer; F32 dequantizes)."""
    _init()
    params = llama_cpp.llama_model_quantize_default_params()
    params.ftype = getattr(llama_cpp, QUANTIZE_FTYPES[qtype])
    params.allow_requantize = True
    params.nthread = threads or default_threads()
    paths = bytes(Path(src)), bytes(Path(dst))  # before the SIGINT flag is set: nothing may raise after it
    native_log.begin_load()
    rc = llama_cpp.llama_model_quantize(*paths, ctypes.byref(params))
    native_log.raise_if_interrupted()
    if rc != 0:
        raise BackendError(f"llama.cpp could not quantize {src} to {qtype} (code {rc}); run with --verbose")


# -- ggml's backend registry: the CPU's features, llama.cpp's rpc-server and its devices --
_rpc_lock = threading.Lock()
_rpc_registered: dict[str, list[int]] = {}


def _ggml() -> Any:
    """ggml's library as llama-cpp-python loads it, with the prototypes used here."""
    from llama_cpp._ggml import libggml

    if not getattr(libggml, "_edgespec_typed", False):
        for name, res, args in GGML_PROTOTYPES:
            fn = getattr(libggml, name)
            fn.restype, fn.argtypes = res, args
        libggml._edgespec_typed = True
    return libggml


@functools.cache
def cpu_features() -> dict[str, str]:
    """What ggml's CPU backend says of itself ({"AVX2": "1", "REPACK": "1", ...}); {} if it does not."""
    _init()
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"CPU")
    addr = lib.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_get_features") if reg else None
    get = ctypes.CFUNCTYPE(ctypes.POINTER(Feature), ctypes.c_void_p)(addr) if addr else None
    listed = itertools.takewhile(lambda f: f.name, get(reg)) if get else ()
    return {f.name.decode(): (f.value or b"").decode() for f in listed}


def _rpc_proc(name: str) -> int:
    _init()
    lib = _ggml()
    reg = lib.ggml_backend_reg_by_name(b"RPC") if llama_cpp.llama_supports_rpc() else None
    proc = lib.ggml_backend_reg_get_proc_address(reg, name.encode()) if reg else None
    if not proc:
        raise BackendError(RPC_REBUILD)
    return int(proc)


def rpc_devices(endpoint: str) -> list[int]:
    """The devices of the rpc-server at `endpoint` ("host:port"), registered with ggml once
    per process (what llama.cpp's own --rpc does). Check the endpoint is reachable first."""
    with _rpc_lock:
        if endpoint not in _rpc_registered:
            reg = ADD_SERVER(_rpc_proc("ggml_backend_rpc_add_server"))(endpoint.encode())
            if not reg:
                raise BackendError(f"the RPC server at {endpoint} offered no device (is it an rpc-server?)")
            lib = _ggml()
            lib.ggml_backend_register(reg)
            _rpc_registered[endpoint] = [
                int(lib.ggml_backend_reg_dev_get(reg, i)) for i in range(lib.ggml_backend_reg_dev_count(reg))
            ]
        return list(_rpc_registered[endpoint])


def device_memory(device: int) -> tuple[int, int]:
    """(free, total) bytes of a device (an RPC device asks its server)."""
    free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
    _ggml().ggml_backend_dev_memory(device, ctypes.byref(free), ctypes.byref(total))
    return int(free.value), int(total.value)


def local_devices(*types: int) -> list[int]:
    """This machine's devices of those types (the default: its GPUs, none on a CPU build),
    RPC devices left out: where a draft goes beside a remote target."""
    _init()
    lib = _ggml()
    remote = {d for devs in _rpc_registered.values() for d in devs}
    devs = (int(lib.ggml_backend_dev_get(i)) for i in range(lib.ggml_backend_dev_count()))
    return [d for d in devs if d not in remote and lib.ggml_backend_dev_type(d) in (types or (DEV_GPU, DEV_IGPU))]


def rpc_served_devices() -> list[int]:
    """What an rpc-server here serves, as llama.cpp's tool chooses: the GPUs, else the CPU."""
    return local_devices() or local_devices(DEV_CPU)[:1]


def rpc_server_function() -> Any:
    """llama.cpp's RPC server entry (a BackendError on a build without RPC)."""
    return START_SERVER(_rpc_proc("ggml_backend_rpc_start_server"))


def serve_rpc(endpoint: str, threads: int, cache_dir: str | None = None) -> None:
    """Run llama.cpp's RPC server on `endpoint` until the process ends (blocks; no return).
    It serves this machine's GPUs, or its CPU when it has none, as llama.cpp's rpc-server."""
    start = rpc_server_function()
    devices = rpc_served_devices()
    if not devices:
        raise BackendError("llama.cpp found no device to serve")
    arr = (ctypes.c_void_p * len(devices))(*devices)
    start(endpoint.encode(), cache_dir.encode() if cache_dir else None, threads, len(devices), arr)


def device_names(devices: Sequence[int]) -> list[str]:
    lib = _ggml()
    return [lib.ggml_backend_dev_name(d).decode("utf-8", "replace") for d in devices]

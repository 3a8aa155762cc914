"""Bounded reader for GGUF headers: a GGUF file is untrusted input.

Contract: `read_gguf(path)` parses the header, the metadata and the tensor table
of a GGUF v2/v3 file (little-endian) and returns a frozen `GGUFInfo`. It trusts
no count, length or offset in the file: each one is checked against the bytes
left in the file and a hard cap *before* anything is read or allocated, so it
finishes quickly on any input. Any defect raises `ModelFileError` with one line
naming the file, the defect and what to do. Tensor data is never read.

Rules follow llama.cpp's own loader (ggml/src/gguf.cpp) so that a file we accept
is one llama.cpp accepts too. This module imports neither llama_cpp nor gguf.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..core.errors import ModelFileError
from .ggml_types import GGML_TYPES
from .gguf_info import TOKENS_KEY, GGUFInfo, SkippedArray, TensorInfo, describe
from .gguf_limits import limits_problem, reading_problem

__all__ = ["GGUFInfo", "SkippedArray", "TensorInfo", "describe", "read_gguf"]

GGUF_MAGIC = b"GGUF"
SUPPORTED_VERSIONS = (2, 3)
DEFAULT_ALIGNMENT = 32
MAX_DIMS = 4  # GGML_MAX_DIMS
TENSOR_ALIGNMENT = 32  # ggml-backend's: a tensor's data in the mapped file must start on it
INTEGER_TYPES = ("I8", "I16", "I32", "I64")  # ggml's ops abort on one where a weight is multiplied
INDEX_TENSORS = ("tid2eid", "d2t")  # integer tables llama.cpp reads by row (DeepSeek-V4's, EAGLE3's)
MAX_TENSOR_NAME = 63  # GGML_MAX_NAME (64) minus the terminating NUL
MAX_KEY_BYTES = 64 * 1024
MAX_STRING_BYTES = 64 * 1024 * 1024  # also always bounded by the bytes left in the file
# Real files have ~50 KVs and a few thousand tensors; these caps keep a crafted
# header from turning into millions of Python iterations (the time bound).
MAX_KV = 65_536
MAX_TENSORS = 65_536
# Strings inside arrays, summed over the file: vocabularies are <= ~260k tokens
# and merges <= ~500k, so real files stay far below this.
MAX_ARRAY_STRINGS = 2_000_000
KEEP_ARRAY_MAX = 4096  # numeric/string arrays up to this size are kept in metadata

# fmt: off
# GGUF value types: id -> (name, struct format; None for string and array).
_UINT32, _STRING, _ARRAY = 4, 8, 9
VALUE_TYPES: dict[int, tuple[str, str | None]] = {
    0: ("uint8", "<B"), 1: ("int8", "<b"), 2: ("uint16", "<H"), 3: ("int16", "<h"),
    4: ("uint32", "<I"), 5: ("int32", "<i"), 6: ("float32", "<f"), 7: ("bool", "<?"),
    8: ("string", None), 9: ("array", None), 10: ("uint64", "<Q"), 11: ("int64", "<q"),
    12: ("float64", "<d"),
}
# fmt: on
_U32 = struct.Struct("<I")
_U64 = struct.Struct("<Q")


def _clean(text: object, limit: int = 80) -> str:
    """Untrusted text for a one-line message: no newlines, bounded length."""
    s = repr(text) if not isinstance(text, Path) else str(text)
    s = s.replace("\n", "\\n").replace("\r", "\\r")
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _bad(path: Path, defect: str) -> ModelFileError:
    return ModelFileError(
        f"{_clean(path, 200)} is not a usable GGUF file: {defect}; "
        "re-download it or convert the model again with llama.cpp's tools"
    )


class _Cursor:
    """Reads little-endian values from a buffer; every read is checked against its end."""

    def __init__(self, buf: mmap.mmap, path: Path) -> None:
        self.buf, self.path, self.pos, self.end = buf, path, 0, len(buf)
        self.strings_left = MAX_ARRAY_STRINGS  # the time bound for string arrays

    @property
    def remaining(self) -> int:
        return self.end - self.pos

    def take(self, n: int, what: str) -> int:
        """Advance past `n` bytes and return where they start."""
        if n < 0 or n > self.end - self.pos:
            raise _bad(self.path, f"truncated while reading {what} at byte {self.pos}")
        start = self.pos
        self.pos += n
        return start

    def u32(self, what: str) -> int:
        return int(_U32.unpack_from(self.buf, self.take(4, what))[0])

    def u64(self, what: str) -> int:
        return int(_U64.unpack_from(self.buf, self.take(8, what))[0])

    def scalar(self, fmt: str, what: str) -> Any:
        return struct.unpack_from(fmt, self.buf, self.take(struct.calcsize(fmt), what))[0]

    def string(self, what: str, cap: int = MAX_STRING_BYTES) -> str:
        n = self.u64(f"the length of {what}")
        if n > self.remaining:
            raise _bad(self.path, f"{what} declares {n} bytes, more than the file can hold")
        if n > cap:
            raise _bad(self.path, f"{what} is {n} bytes long, over the limit of {cap}")
        start = self.take(n, what)
        return self.buf[start : start + n].decode("utf-8", errors="surrogateescape")


def read_gguf(path: str | Path) -> GGUFInfo:
    """Parse and validate a GGUF file's header; raise ModelFileError on any defect."""
    path = Path(path)
    if not path.exists():
        raise ModelFileError(f"model file {_clean(path, 200)} does not exist; check the path")
    if not path.is_file():
        raise ModelFileError(f"{_clean(path, 200)} is not a file; give the path of a .gguf file")
    try:
        with path.open("rb") as f:
            size = path.stat().st_size
            if size == 0:
                raise _bad(path, "the file is empty")
            with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
                return _parse(_Cursor(buf, path), size)
    except OSError as err:
        raise ModelFileError(f"cannot read {_clean(path, 200)}: {err.strerror or err}; check its permissions") from err


def _parse(cur: _Cursor, size: int) -> GGUFInfo:
    path = cur.path
    if cur.remaining < 4 or cur.buf[0:4] != GGUF_MAGIC:
        raise _bad(path, "it does not start with the GGUF magic bytes")
    cur.take(4, "magic")
    version = _check_version(path, cur.u32("the version"))
    n_tensors = cur.u64("the tensor count")
    n_kv = cur.u64("the metadata count")
    _check_counts(cur, n_tensors, n_kv)
    metadata = _read_metadata(cur, n_kv)
    alignment = _alignment(path, metadata)
    raw = [_read_tensor_info(cur) for _ in range(n_tensors)]
    data_offset = _pad(cur.pos, alignment) if n_tensors else cur.pos
    tensors = _place_tensors(path, raw, data_offset, alignment, size)
    info = GGUFInfo(path, size, version, alignment, data_offset, metadata, tensors)
    problem = reading_problem(info)  # what llama.cpp refuses, but edgespec's checks would misread first
    if problem:
        raise _bad(path, problem)
    problem = limits_problem(info)  # what llama.cpp would assert (abort the process) on rather than refuse
    if problem:
        raise _bad(path, f"{problem}, which would abort llama.cpp")
    return info


def _check_version(path: Path, version: int) -> int:
    if version in SUPPORTED_VERSIONS:
        return version
    if version == 1:
        raise _bad(path, "GGUF v1 is no longer supported by llama.cpp")
    if version & 0xFFFF == 0 and version >> 16:  # a small version byte-swapped
        raise _bad(path, f"version {version} looks big-endian, which is not supported")
    raise _bad(path, f"unsupported GGUF version {version} (supported: 2 and 3)")


def _check_counts(cur: _Cursor, n_tensors: int, n_kv: int) -> None:
    # Smallest possible records: a KV is key length (8) + type (4) + 1 byte; a tensor
    # info is name length (8) + n_dims (4) + type (4) + offset (8).
    if n_kv > MAX_KV or n_tensors > MAX_TENSORS or n_kv * 13 + n_tensors * 24 > cur.remaining:
        raise _bad(
            cur.path,
            f"its header declares {n_tensors} tensors and {n_kv} metadata entries, "
            f"more than a {cur.end}-byte file can hold",
        )


def _read_metadata(cur: _Cursor, n_kv: int) -> dict[str, Any]:
    metadata: dict[str, Any] = {}
    for i in range(n_kv):
        key = cur.string(f"metadata key #{i}", MAX_KEY_BYTES)
        if not key:
            raise _bad(cur.path, f"metadata key #{i} is empty")
        if key in metadata:
            raise _bad(cur.path, f"metadata key {_clean(key)} appears twice")
        if "\0" in key:  # llama.cpp reads a key up to its NUL: it would shadow the key before it
            raise _bad(cur.path, f"metadata key {_clean(key)} holds a NUL byte")
        vtype = cur.u32(f"the type of {_clean(key)}")
        if key == "general.alignment" and vtype != _UINT32:  # llama.cpp's loader reads it as u32 or refuses
            name = VALUE_TYPES.get(vtype, ("an unknown type",))[0]
            raise _bad(cur.path, f"general.alignment is stored as {name}; llama.cpp reads only a uint32")
        metadata[key] = _read_value(cur, key, vtype)
    return metadata


def _value_type(cur: _Cursor, key: str, vtype: int) -> tuple[str, str | None]:
    if vtype not in VALUE_TYPES:
        raise _bad(cur.path, f"metadata {_clean(key)} has unknown value type {vtype}")
    return VALUE_TYPES[vtype]


def _read_value(cur: _Cursor, key: str, vtype: int) -> Any:
    name, fmt = _value_type(cur, key, vtype)
    if fmt is not None:
        return cur.scalar(fmt, _clean(key))
    if vtype == _STRING:
        return cur.string(f"the value of {_clean(key)}")
    return _read_array(cur, key)


def _read_array(cur: _Cursor, key: str) -> Any:
    etype = cur.u32(f"the element type of {_clean(key)}")
    ename, fmt = _value_type(cur, key, etype)
    count = cur.u64(f"the length of {_clean(key)}")
    if etype == _ARRAY:  # llama.cpp's loader rejects arrays of arrays
        raise _bad(cur.path, f"metadata {_clean(key)} nests arrays, which llama.cpp rejects")
    if fmt is not None:
        esize = struct.calcsize(fmt)
        # The check that matters: count * element size must fit in the bytes left.
        if count > cur.remaining // esize:
            raise _bad(cur.path, f"array {_clean(key)} declares {count} elements past the file end")
        start = cur.take(count * esize, _clean(key))
        if count > KEEP_ARRAY_MAX:
            return SkippedArray(ename, count)
        return list(struct.unpack_from(f"<{count}{fmt[1]}", cur.buf, start))
    return _read_string_array(cur, key, count)


def _read_string_array(cur: _Cursor, key: str, count: int) -> Any:
    # Each string costs at least its 8-byte length, which bounds count by the file size.
    if count > cur.strings_left or count > cur.remaining // 8:
        raise _bad(
            cur.path,
            f"array {_clean(key)} declares {count} strings, more than the file can hold "
            f"or the limit of {MAX_ARRAY_STRINGS} strings per file",
        )
    cur.strings_left -= count
    keep = key == TOKENS_KEY or count <= KEEP_ARRAY_MAX
    buf, pos, end, unpack = cur.buf, cur.pos, cur.end, _U64.unpack_from
    out: list[str] = []
    # Hot loop (one pass per vocabulary entry): locals only, one bounds check per string.
    for _ in range(count):
        if end - pos < 8:
            break
        (n,) = unpack(buf, pos)
        pos += 8
        if n > end - pos:
            break
        if keep:
            out.append(buf[pos : pos + n].decode("utf-8", errors="surrogateescape"))
        pos += n
    else:
        cur.pos = pos
        return out if keep else SkippedArray("string", count)
    cur.pos = pos
    raise _bad(cur.path, f"a string in array {_clean(key)} runs past the file end")


def _alignment(path: Path, metadata: Mapping[str, Any]) -> int:
    value = metadata.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0 or value & (value - 1):
        raise _bad(path, f"general.alignment {_clean(value)} is not a power of two")
    return value


def _pad(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def _read_tensor_info(cur: _Cursor) -> tuple[str, int, tuple[int, ...], int]:
    # Fixed labels, not f-strings: this runs once per tensor and must stay cheap.
    name = cur.string("a tensor name", MAX_TENSOR_NAME)
    n_dims = cur.u32("a tensor rank")
    if n_dims > MAX_DIMS:
        raise _bad(cur.path, f"tensor {_clean(name)} has {n_dims} dimensions (at most 4)")
    start = cur.take(8 * n_dims + 12, "a tensor shape")
    shape = struct.unpack_from(f"<{n_dims}Q", cur.buf, start)
    ttype, offset = struct.unpack_from("<IQ", cur.buf, start + 8 * n_dims)
    return name, ttype, shape, offset


def _place_tensors(
    path: Path,
    raw: list[tuple[str, int, tuple[int, ...], int]],
    data_offset: int,
    alignment: int,
    size: int,
) -> tuple[TensorInfo, ...]:
    seen: set[str] = set()
    out: list[TensorInfo] = []
    expected = 0  # llama.cpp requires tensors packed in order, each padded to alignment
    for name, ttype, shape, offset in raw:
        label = _clean(name)
        if name in seen:
            raise _bad(path, f"tensor {label} appears twice")
        seen.add(name)
        n_bytes, type_name = _tensor_bytes(path, label, ttype, shape)
        if offset != expected:
            raise _bad(path, f"tensor {label} has data offset {offset}, expected {expected}")
        start = data_offset + offset
        if start % TENSOR_ALIGNMENT:  # the CPU backend asserts on a tensor not 32-byte aligned in memory
            raise _bad(path, f"tensor {label} starts at byte {start}, not a multiple of {TENSOR_ALIGNMENT}")
        if n_bytes > size - start:
            raise _bad(path, f"tensor {label} data runs past the end of the file (truncated?)")
        out.append(TensorInfo(name, type_name, shape, start, n_bytes))
        expected = offset + _pad(n_bytes, alignment)
    return tuple(out)


def _fits_ggml(shape: tuple[int, ...]) -> bool:
    """ggml's own test of a shape (ggml.c, ggml_new_tensor_impl's check): each dimension past
    the first that is above 1 must keep the running element count within int64."""
    if any(d >= 2**63 for d in shape):
        return False
    count = shape[0] if shape else 1
    for d in shape[1:]:
        if d > 1:
            if (2**63 - 1) // d <= count:
                return False
            count *= d
    return True


def _tensor_bytes(path: Path, label: str, ttype: int, shape: tuple[int, ...]) -> tuple[int, str]:
    if ttype not in GGML_TYPES:
        raise _bad(path, f"tensor {label} has unknown ggml type {ttype}")
    type_name, block, type_size = GGML_TYPES[ttype]
    if type_name in INTEGER_TYPES and not any(part in label for part in INDEX_TENSORS):
        raise _bad(path, f"tensor {label} has integer type {type_name}")
    n = 1
    for d in shape:
        n *= d
    if not _fits_ggml(shape):
        raise _bad(path, f"tensor {label} has shape {shape}, whose size overflows")
    rows = shape[0] if shape else 1
    if rows % block:
        raise _bad(path, f"tensor {label} rows of {rows} do not fill {type_name} blocks")
    return n // block * type_size, type_name

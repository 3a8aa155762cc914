"""What a GGUF header says, as values: the facts the pair checks and `edgespec inspect` use.

`gguf_file.read_gguf` builds a `GGUFInfo` from a file it has checked; nothing
here reads a file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .ggml_types import FILE_TYPES

TOKENS_KEY = "tokenizer.ggml.tokens"


@dataclass(frozen=True)
class SkippedArray:
    """A large array that was validated but not kept (merges, scores, token types)."""

    elem_type: str
    count: int


@dataclass(frozen=True)
class TensorInfo:
    name: str
    type_name: str
    shape: tuple[int, ...]
    offset: int  # absolute file offset of the tensor data
    n_bytes: int

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n


@dataclass(frozen=True)
class GGUFInfo:
    path: Path
    file_size: int
    version: int
    alignment: int
    data_offset: int
    metadata: Mapping[str, Any] = field(repr=False)
    tensors: tuple[TensorInfo, ...] = field(repr=False)

    def arch_value(self, suffix: str) -> Any:
        """`{architecture}.{suffix}` from the metadata, or None."""
        return self.metadata.get(f"{self.architecture}.{suffix}")

    def arch_int(self, suffix: str) -> int | None:
        """`{architecture}.{suffix}` as an integer (a per-layer list: its largest), or None."""
        value = self.arch_value(suffix)
        if isinstance(value, list):  # some models give per-layer head counts
            value = max((v for v in value if isinstance(v, int)), default=None)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def architecture(self) -> str:
        value = self.metadata.get("general.architecture")
        return value if isinstance(value, str) else "unknown"

    @property
    def name(self) -> str | None:
        value = self.metadata.get("general.name")
        return value if isinstance(value, str) else None

    @property
    def parameter_count(self) -> int:
        return sum(t.n_elements for t in self.tensors)

    @property
    def tensor_bytes(self) -> int:
        return sum(t.n_bytes for t in self.tensors)

    @property
    def bits_per_weight(self) -> float:
        n = self.parameter_count
        return self.tensor_bytes * 8 / n if n else 0.0

    @property
    def quantization(self) -> str:
        """general.file_type's label, else the tensor type holding most weights."""
        ftype = self.metadata.get("general.file_type")
        if isinstance(ftype, int) and ftype in FILE_TYPES:
            return FILE_TYPES[ftype]
        by_type: dict[str, int] = {}
        for t in self.tensors:
            by_type[t.type_name] = by_type.get(t.type_name, 0) + t.n_elements
        return max(by_type, key=lambda k: by_type[k]) if by_type else "unknown"

    @property
    def vocab_type(self) -> str | None:
        value = self.metadata.get("tokenizer.ggml.model")
        return value if isinstance(value, str) else None

    @property
    def tokens(self) -> list[str] | None:
        """The vocabulary, or None (absent, too long to keep, or not an array of strings)."""
        value = self.metadata.get(TOKENS_KEY)
        return value if isinstance(value, list) and all(isinstance(w, str) for w in value) else None

    @property
    def vocab_size(self) -> int | None:
        tokens = self.tokens
        return len(tokens) if tokens is not None else self.arch_int("vocab_size")

    def _token_id(self, key: str) -> int | None:
        value = self.metadata.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    def _flag(self, key: str) -> bool | None:
        value = self.metadata.get(key)
        return value if isinstance(value, bool) else None

    @property
    def bos_id(self) -> int | None:
        return self._token_id("tokenizer.ggml.bos_token_id")

    @property
    def eos_id(self) -> int | None:
        return self._token_id("tokenizer.ggml.eos_token_id")

    @property
    def add_bos(self) -> bool | None:
        return self._flag("tokenizer.ggml.add_bos_token")

    @property
    def add_eos(self) -> bool | None:
        return self._flag("tokenizer.ggml.add_eos_token")

    @property
    def context_length(self) -> int | None:
        return self.arch_int("context_length")

    @property
    def block_count(self) -> int | None:
        return self.arch_int("block_count")

    @property
    def embedding_length(self) -> int | None:
        return self.arch_int("embedding_length")

    @property
    def head_count(self) -> int | None:
        return self.arch_int("attention.head_count")

    @property
    def head_count_kv(self) -> int | None:
        return self.arch_int("attention.head_count_kv") or self.head_count

    @property
    def chat_template(self) -> str | None:
        value = self.metadata.get("tokenizer.chat_template")
        return value if isinstance(value, str) else None

    @property
    def has_chat_template(self) -> bool:
        return bool(self.chat_template)


def _shown(text: object) -> object:
    """File text as it can be printed: bytes that were not UTF-8 (kept as lone surrogates by
    the reader) become U+FFFD, which a strict UTF-8 terminal would otherwise refuse."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace") if isinstance(text, str) else text


def describe(info: GGUFInfo) -> dict[str, Any]:
    """The facts `edgespec inspect` prints for one model."""
    return {
        "architecture": _shown(info.architecture),
        "name": _shown(info.name),
        "parameters": info.parameter_count,
        "quantization": info.quantization,
        "bits_per_weight": round(info.bits_per_weight, 3),
        "vocab_type": _shown(info.vocab_type),
        "vocab_size": info.vocab_size,
        "context_length": info.context_length,
        "chat_template": info.has_chat_template,
        "file_size": info.file_size,
    }

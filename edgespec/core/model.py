"""The two protocols a backend implements; everything above them is backend-agnostic.

`Model` is what the decoder needs of either model: evaluate tokens at a
position and return logits rows, cut the KV cache, recognise end-of-generation
tokens. `TextModel` adds what the engine needs of the target: tokenizing,
token bytes, the chat template. `edgespec.llama.backend.LlamaModel` implements
both over llama.cpp; tests and `edgespec bench --simulate` implement them with
fakes. `Engine(target, draft)` accepts any objects that follow them.

The KV contract: a model's cache is append-only. `eval(tokens, pos)` must start
exactly where the cache ends (`pos` == tokens held) and returns one logits row
per token from `logits_from` on (none when it is None); the rows may be a view
that the next `eval` overwrites, so read them before evaluating again. A model may also
offer `set_head(k) -> bool`: from then on return each row as its k largest logits (a
`sampling.Heads`; the decoder asks where a request's sampling starts with top-k or is
greedy, and asks the draft also where top-k is off: `sampling.draft_params`), so on a GPU
only those leave the device.
`trim(n)` keeps the first n tokens and must fail loudly (raise) when the cache
cannot be cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from .sampling import Rows


class Model(Protocol):
    n_vocab: int
    n_ctx: int

    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> Rows: ...

    def trim(self, n_keep: int) -> None: ...

    def is_eog(self, token: int) -> bool: ...


class TextModel(Model, Protocol):
    """What the engine needs of the target beyond `Model`."""

    add_bos: bool
    bos_id: int
    eos_id: int

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]: ...

    def piece(self, token: int, special: bool = False) -> bytes: ...

    def token_text(self, token: int) -> str: ...

    def chat_template(self) -> str | None: ...

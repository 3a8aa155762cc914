"""What llama.cpp's loader asserts instead of checking: metadata that, out of range, aborts
the whole process inside `llama_model_load_from_file` (a GGML_ASSERT, SIGABRT) or on the
first tokenization (an uncaught std::out_of_range) rather than failing the load.

`limits_problem(info)` tests a parsed header against the pinned llama.cpp's own rules
(src/llama-model.cpp `load_hparams`, src/llama-vocab.cpp `load` and `byte_to_token`), so a
crafted or corrupt file is one ModelFileError line before native code reads it. Each
rule here was found aborting the process by fuzzing a small valid model's metadata
(docs/bench-history.md, stops 58 and 60). Left out: a per-layer head count of 0 (one of
llama's layers without attention heads aborts it, but hybrid architectures have such
layers by design). Values of the wrong type are left alone, as llama.cpp refuses those
cleanly, except where edgespec's own reading would go wrong first (`reading_problem`).
Pure: no llama_cpp.
"""

from __future__ import annotations

import math

from .gguf_info import TOKENS_KEY, GGUFInfo

MAX_LAYERS = 512  # LLAMA_MAX_LAYERS (src/llama-hparams.h)
MAX_EXPERTS = 1024  # LLAMA_MAX_EXPERTS
ROPE_SCALING = ("none", "linear", "yarn", "longrope")  # LLAMA_ROPE_SCALING_TYPES
EXPERTS_ONE_IS_NONE = ("hunyuan_vl", "hunyuan-dense")  # an expert count of 0 or 1 means none there
NEEDS_EXPERTS = ("bailingmoe2", "glm4moe", "grovemoe", "llada-moe", "smallthinker")  # graphs assert experts > 0
EPSILONS = ("attention.layer_norm_rms_epsilon", "attention.layer_norm_epsilon", "attention.group_norm_epsilon")
NO_TOKENIZER = ("none", "no_vocab")  # llama.cpp loads such a model and aborts at its first tokenization


def limits_problem(info: GGUFInfo) -> str | None:
    """What in this header llama.cpp would abort on, in a few words, or None."""
    return _hparams_problem(info) or _vocab_problem(info)


def reading_problem(info: GGUFInfo) -> str | None:
    """What in this header llama.cpp refuses but edgespec would misread first, or None: a
    vocabulary that is not strings (the checks below take it for one), a negative context
    length (taken for the user's own n_ctx: "n_ctx must be a positive number ..., got -5")."""
    if isinstance(info.metadata.get(TOKENS_KEY), list) and info.tokens is None:  # a list, not of strings
        return f"{TOKENS_KEY} is not an array of strings"
    context = info.arch_int("context_length")
    if context is not None and context < 0:
        return f"{info.architecture}.context_length is {context}, not a number of tokens"
    return None


def _hparams_problem(info: GGUFInfo) -> str | None:
    arch, get = info.architecture, info.arch_int
    layers = get("block_count")
    if layers is not None and not 0 < layers <= MAX_LAYERS:
        return f"{arch}.block_count is {layers} (1 to {MAX_LAYERS})"
    for key in ("nextn_predict_layers", "posnet.block_count", "convnext.block_count"):
        value = get(key)
        if value is not None and layers is not None and value > layers:
            return f"{arch}.{key} is {value}, more than the {layers} layers"
    for key in EPSILONS:  # ggml's norms assert eps >= 0 at the first decode
        eps = info.arch_value(key)
        if isinstance(eps, float) and not (math.isfinite(eps) and eps >= 0):
            return f"{arch}.{key} is {eps} (a finite number >= 0)"
    scaling = info.arch_value("rope.scaling.type")
    if isinstance(scaling, str) and scaling not in ROPE_SCALING:
        return f"{arch}.rope.scaling.type is {scaling[:40]!r} (one of {', '.join(ROPE_SCALING)})"
    experts = get("expert_count") or 0
    if arch in EXPERTS_ONE_IS_NONE and experts <= 1:
        return None
    used = get("expert_used_count") or 0  # per layer: the most of them
    groups, groups_used = get("expert_group_count") or 0, get("expert_group_used_count") or 0
    if arch in NEEDS_EXPERTS and not (experts and used):
        return f"{arch} needs experts: expert_count {experts}, expert_used_count {used}"
    if experts > MAX_EXPERTS:
        return f"{arch}.expert_count is {experts} (at most {MAX_EXPERTS})"
    if used > experts:
        return f"{arch}.expert_used_count is {used}, more than the {experts} experts"
    if experts and not used:
        return f"{arch}.expert_count is {experts} but expert_used_count is 0"
    if groups >= experts > 0 or not experts and groups:
        return f"{arch}.expert_group_count is {groups} with {experts} experts"
    if experts and groups > 1 and (experts % groups or not 0 < groups_used < groups):
        return f"{arch}: {experts} experts in {groups} groups, {groups_used} of them used"
    return None


def _vocab_problem(info: GGUFInfo) -> str | None:
    if info.vocab_type in NO_TOKENIZER:
        return f"tokenizer.ggml.model is {info.vocab_type!r}: it has no tokenizer to run a chat with"
    tokens = info.tokens
    if tokens is None:
        return None
    seen: dict[str, int] = {}
    for i, word in enumerate(tokens):
        word = _token_text(i, word)
        if word in seen:
            return f"tokens {seen[word]} and {i} are both {word[:40]!r}"
        seen[word] = i
    if info.vocab_type == "llama":  # SentencePiece: bytes it has no piece for fall back
        for byte in range(256):
            if f"<0x{byte:02X}>" not in seen and _byte_text(byte) not in seen:
                return f"its SentencePiece vocabulary has no token for byte 0x{byte:02X} (<0x{byte:02X}>)"
    if info.vocab_type == "rwkv":
        return _rwkv_problem(tokens)
    return None


def _rwkv_problem(tokens: list[str]) -> str | None:
    """llama.cpp's RWKV tokenizer (`llm_tokenizer_rwkv_session`) takes the longest token on the
    trie path of the text's next bytes; where the path holds no token it goes back to the
    text's start and appends token 0 for ever (memory without bound, then an abort). A byte
    that starts a token must be a token of its own for every path to hold one."""
    alone: set[int] = set()
    starts: dict[int, int] = {}
    for i, word in enumerate(tokens):
        text = _rwkv_unescape(_token_text(i, word).encode("utf-8", "surrogateescape"))
        if len(text) == 1:
            alone.add(text[0])
        if text:
            starts.setdefault(text[0], i)
    for byte, i in sorted(starts.items()):
        if byte not in alone:
            return f"its RWKV vocabulary has no token for byte 0x{byte:02X} alone (token {i} starts with it)"
    return None


def _rwkv_unescape(text: bytes) -> bytes:
    """A token's bytes as llama.cpp's `llama_unescape_rwkv_token` makes them (\\t, \\n, \\r,
    \\xHH, \\c for c; its hex digits unchecked, read as x86's signed char reads them: where char
    is unsigned, as on Linux on ARM, a digit past 0x7F reads otherwise, which only a hand-made
    vocabulary holds)."""
    out, escaping, hex_left, acc = bytearray(), False, 0, 0
    for c in text:
        if hex_left:
            digit = c - 87 if 97 <= c < 128 else c - 48  # (c >= 'a') on a signed char
            acc = ((acc << 4) + (digit & 0xFF)) & 0xFF
            hex_left -= 1
            if not hex_left:
                out.append(acc)
                acc = 0
        elif escaping:
            escaping = False
            if c == 0x78:  # x
                hex_left = 2
            else:
                out.append({0x74: 9, 0x6E: 10, 0x72: 13}.get(c, c))  # \t \n \r, else the character
        elif c == 0x5C:  # a backslash
            escaping = True
        else:
            out.append(c)
    return bytes(out)


def _token_text(i: int, word: str) -> str:
    """Token i's text as llama.cpp keeps it: up to a NUL byte, and an empty one named [EMPTY_i]."""
    return word.split("\0", 1)[0] or f"[EMPTY_{i}]"


def _byte_text(byte: int) -> str:
    """The one-byte token text llama.cpp falls back to, as the reader decodes it."""
    return bytes([byte]).decode("utf-8", errors="surrogateescape")

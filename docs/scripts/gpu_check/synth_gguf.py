"""Write a llama-architecture GGUF of any shape with random Q4_0 weights and a vocabulary padded
to any size, the tokenizer taken from a real model. Made for the GPU check (README.md beside
this): a 7B-class target with a 262k vocabulary does not travel in the 64 MiB a device call
carries, but its shape can be made there in seconds, and its costs are a real model's.

    python3 synth_gguf.py TEMPLATE.gguf OUT.gguf --vocab 262144 --embd 4096 --layers 32 \
        --ff 11008 --heads 32 --kv-heads 8 [--gain 0.025] [--logit-std 4] [--seed 0]
    python3 synth_gguf.py MODEL.gguf TOKENIZER.gguf --tokenizer-only   # a template that travels

Then `truncate_gguf.py OUT.gguf DRAFT.gguf 4` cuts a draft from it that agrees with it often.

The weights are random: each block's input is normalised, its q/k/v and gate/up projections
keep the scale (gain 1), and its attention output and down projections scale by `--gain`, so
each block adds a small random turn to the residual stream that the token embedding carries.
The next token then depends mostly on the current one, through the output projection (logits
of standard deviation `--logit-std`); a draft cut after a few blocks misses the turns of the
rest, so `--gain` sets how often it agrees with the whole model. The text means nothing: the
figures it gives are costs, and the runtime's time around them.

Q4_0 block: an f16 scale d and 32 four-bit quants q, each weight (q - 8) * d. A random quant
of 0 is read as 8 (a weight of 0), so that the weights' mean is zero: with 0..15 every
projection adds -0.5 d times the sum of its inputs to each output, one direction shared by all
blocks and tokens, which piles up with depth until every token's next is the same. A weight's
standard deviation is then 4.18 d, so a projection over n inputs of unit RMS has an output
deviation of 4.18 * d * sqrt(n): d = gain / (4.18 * sqrt(n)).
"""

from __future__ import annotations

import argparse
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter
from truncate_gguf import finish  # beside this file

BLOCK, BLOCK_BYTES = 32, 18
_NIBBLE = np.where(np.arange(16) == 0, 8, np.arange(16))  # a random nibble, 0 read as 8 (weight 0)
Q_STD = float(np.std(_NIBBLE - 8))  # 4.18: weights -7d..7d, mean zero


def q4_0(rng: np.random.Generator, rows: int, cols: int, gain: float) -> np.ndarray:
    """A rows x cols Q4_0 tensor (its bytes) of random weights with the given gain over cols inputs."""
    d = np.float16(gain / (Q_STD * np.sqrt(cols)))
    data = np.frombuffer(bytearray(rng.bytes(rows * (cols // BLOCK) * BLOCK_BYTES)), dtype=np.uint8)
    data |= ((data & 0x0F) == 0).view(np.uint8) << 3  # a zero nibble becomes 8
    data |= ((data & 0xF0) == 0).view(np.uint8) << 7
    data = data.reshape(rows, cols // BLOCK, BLOCK_BYTES)
    data[:, :, :2] = np.frombuffer(d.tobytes(), dtype=np.uint8)
    return data.reshape(rows, (cols // BLOCK) * BLOCK_BYTES)


def copy_tokenizer(r: GGUFReader, w: GGUFWriter, vocab: int) -> None:
    """Copy tokenizer.* from the template, padding its token list with plain tokens to `vocab`."""
    for name, field in r.fields.items():
        if not name.startswith("tokenizer."):
            continue
        value = field.contents()
        if name == "tokenizer.ggml.tokens":
            value = value + [f"<|pad_{i}|>" for i in range(len(value), vocab)]
        elif name in ("tokenizer.ggml.token_type", "tokenizer.ggml.scores"):
            value = value + [1 if name.endswith("type") else 0.0] * (vocab - len(value))
        if field.types[0] == GGUFValueType.ARRAY:
            w.add_key_value(name, value, field.types[0], sub_type=field.types[-1])
        else:
            w.add_key_value(name, value, field.types[0])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("template")
    ap.add_argument("out")
    for name, default in (
        ("vocab", 262144),
        ("embd", 4096),
        ("layers", 32),
        ("ff", 11008),
        ("heads", 32),
        ("kv-heads", 8),
        ("seed", 0),
    ):
        ap.add_argument(f"--{name}", type=int, default=default)
    ap.add_argument("--gain", type=float, default=0.025)
    ap.add_argument("--logit-std", type=float, default=4.0)
    ap.add_argument(
        "--tokenizer-only", action="store_true", help="write the template's tokenizer alone (a template that travels)"
    )
    a = ap.parse_args()
    r = GGUFReader(a.template)
    n_tokens = len(r.fields["tokenizer.ggml.tokens"].contents())
    if a.vocab < n_tokens:
        ap.error(f"--vocab must be at least the template's {n_tokens} tokens")
    if a.tokenizer_only:
        w = GGUFWriter(a.out, "llama")
        copy_tokenizer(r, w, n_tokens)
        finish(w)
        return
    head = a.embd // a.heads
    kv = head * a.kv_heads
    w = GGUFWriter(a.out, "llama")
    w.add_name(f"random {a.layers}x{a.embd} vocab {a.vocab}")
    w.add_context_length(4096)
    w.add_embedding_length(a.embd)
    w.add_block_count(a.layers)
    w.add_feed_forward_length(a.ff)
    w.add_head_count(a.heads)
    w.add_head_count_kv(a.kv_heads)
    w.add_rope_dimension_count(head)
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_vocab_size(a.vocab)
    w.add_file_type(2)  # MOSTLY_Q4_0
    copy_tokenizer(r, w, a.vocab)
    ones = np.ones(a.embd, dtype=np.float32)
    # (name, rows, cols, gain) of each Q4_0 tensor; the embedding is looked up, not multiplied:
    # its rows get a unit deviation (gain sqrt(cols))
    shapes = [("token_embd.weight", a.vocab, a.embd, np.sqrt(a.embd)), ("output.weight", a.vocab, a.embd, a.logit_std)]
    for i in range(a.layers):
        p = f"blk.{i}."
        shapes += [
            (p + "attn_q.weight", a.embd, a.embd, 1.0),
            (p + "attn_k.weight", kv, a.embd, 1.0),
            (p + "attn_v.weight", kv, a.embd, 1.0),
            (p + "attn_output.weight", a.embd, a.embd, a.gain),
            (p + "ffn_gate.weight", a.ff, a.embd, 1.0),
            (p + "ffn_up.weight", a.ff, a.embd, 1.0),
            (p + "ffn_down.weight", a.embd, a.ff, a.gain),
        ]

    def make(i: int) -> np.ndarray:  # one generator per tensor: the same file on any thread count
        _, rows, cols, gain = shapes[i]
        return q4_0(np.random.default_rng([a.seed, i]), rows, cols, gain)

    with ThreadPoolExecutor(os.cpu_count()) as pool:
        for (name, *_), data in zip(shapes, pool.map(make, range(len(shapes)))):
            w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=GGMLQuantizationType.Q4_0)
    w.add_tensor("output_norm.weight", ones)
    for i in range(a.layers):
        w.add_tensor(f"blk.{i}.attn_norm.weight", ones)
        w.add_tensor(f"blk.{i}.ffn_norm.weight", ones)
    finish(w)


if __name__ == "__main__":
    main()

"""A real llama.cpp pair with a 262k-token vocabulary on this CPU: the random-weight models
docs/scripts/gpu_check/synth_gguf.py writes for the GPU check (the demo's tokenizer padded
to 262,144 tokens), small enough to make in a second. Speculation through the real engine at
the vocabulary size of the largest tokenizers in use: the pair check passes the padded
tokenizer, greedy speculation is plain decoding, and sampled speculation drafts and runs.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.real

SCRIPTS = Path(__file__).resolve().parents[1] / "docs" / "scripts" / "gpu_check"
VOCAB = 262144


@pytest.fixture(scope="module")
def pair(demo_draft: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("vocab")
    target, draft = d / "target.gguf", d / "draft.gguf"
    shape = ["--vocab", str(VOCAB), "--embd", "128", "--layers", "8", "--ff", "256", "--heads", "4", "--kv-heads", "2"]
    subprocess.run([sys.executable, SCRIPTS / "synth_gguf.py", demo_draft, target, *shape], check=True)
    subprocess.run([sys.executable, SCRIPTS / "truncate_gguf.py", target, draft, "2"], check=True)
    return str(target), str(draft)


def test_a_262k_vocabulary_pair_speculates_losslessly_through_llama_cpp(pair: tuple[str, str]) -> None:
    from edgespec import Engine

    engine = Engine.load(*pair, n_ctx=1024, lookup=False)
    try:
        info = engine.info()
        assert info.pair is not None and info.pair.compatible, info.pair
        assert info.target["vocab_size"] == VOCAB
        prompt = "Write a haiku about the sea."
        plain = engine.generate(prompt, temperature=0, max_tokens=48, speculative=False)
        engine.reset()
        spec = engine.generate(prompt, temperature=0, max_tokens=48, k=4)
        assert spec.tokens == plain.tokens
        assert spec.stats.n_drafted > 0 and spec.stats.n_accepted > 0  # the cut draft agrees often
        assert max(plain.tokens) >= 49152  # the padded ids are really sampled: the rows are 262k long
        engine.reset()
        sampled = engine.generate(prompt, temperature=0.8, top_k=0, top_p=0.95, min_p=0.05, max_tokens=48, seed=3)
        assert sampled.stats.n_generated == 48 and sampled.stats.n_drafted > 0
    finally:
        engine.close()

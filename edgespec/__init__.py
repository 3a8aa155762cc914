"""edgespec: lossless speculative decoding for local GGUF models.

from edgespec import Engine
engine = Engine.from_pair("demo")            # or Engine.load(target_path, draft_path)
for event in engine.stream("Why is the sky blue?", temperature=0.8):
    print(event.text, end="", flush=True)

The layers (README, "Code map"): `core` (pure decoding: sampling, verify, the
decoder loop, the K controller, text, events), `llama` (the llama.cpp side:
the one module that imports llama_cpp, GGUF reading, pair checks, models),
`api` (the Engine and its Generation handle), `frontends` (CLI, server, bench).
"""

# llama.cpp's libraries load before numpy does: on a CUDA build (an H200 machine, numpy 2.5
# from PyPI) every model load segfaulted when numpy had been imported first, and none did
# the other way round (docs/bench-history.md, stop 38). An app that imports numpy itself
# should import edgespec first.
# isort: off
from .llama import backend as _backend  # noqa: F401

# isort: on
from .api.checks import check_structured_output
from .api.engine import Engine, Prompt
from .api.generation import Generation
from .api.isolated import IsolatedEngine
from .api.rpc import serve_rpc, served_devices
from .core import defaults
from .core.errors import BusyError, ContextFullError, EdgespecError, EngineCrashed
from .core.events import Result, Segment, Stats, StreamEvent, TokenLogprob
from .core.info import EngineInfo, GpuOffload, PairVerdict
from .core.model import Model, TextModel
from .core.sampling import SamplingParams
from .core.tools import CallParser, ToolCall, ToolSet

__all__ = [
    "BusyError",
    "CallParser",
    "ContextFullError",
    "EdgespecError",
    "Engine",
    "EngineCrashed",
    "EngineInfo",
    "Generation",
    "GpuOffload",
    "IsolatedEngine",
    "Model",
    "PairVerdict",
    "Prompt",
    "Result",
    "SamplingParams",
    "Segment",
    "Stats",
    "StreamEvent",
    "TextModel",
    "TokenLogprob",
    "ToolCall",
    "ToolSet",
    "check_structured_output",
    "defaults",
    "serve_rpc",
    "served_devices",
]
__version__ = "0.1.0"

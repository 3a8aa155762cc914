"""edgespec: lossless speculative decoding for local GGUF models.

from edgespec import Engine
engine = Engine.from_pair("demo")            # or Engine.load(target_path, draft_path)
for event in engine.stream("Why is the sky blue?", temperature=0.8):
    print(event.text, end="", flush=True)
"""

from .engine import Engine
from .errors import EdgespecError
from .events import Result, Stats, StreamEvent
from .sampling import SamplingParams

__all__ = ["Engine", "EdgespecError", "Result", "SamplingParams", "Stats", "StreamEvent"]
__version__ = "0.1.0"

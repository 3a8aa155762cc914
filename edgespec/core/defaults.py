"""Every default a user can see, defined once.

argparse, the server's request model, the chat, `Engine.stream` and the
README's tables all read these names; a test checks the README against them.
"""

from __future__ import annotations

# sampling (llama.cpp's default chain: top-k, top-p, min-p, then temperature)
TEMPERATURE = 0.8  # 0 = greedy
TOP_K = 40  # <= 0: disabled
TOP_P = 0.95  # >= 1: disabled
MIN_P = 0.05  # <= 0: disabled

MAX_TOKENS = 256  # tokens generated per request unless asked otherwise
MAX_TOKENS_CAP = 2048  # the most one server request may ask for (--max-tokens-cap)
N_CTX = 4096  # context size of both models
K_LIMIT = 32  # largest fixed K a request or a pair may ask for
K_MAX = K_LIMIT  # largest K the adaptive controller may grow to (it stops where the machine says)

# the server
HOST = "127.0.0.1"
PORT = 8080
QUEUE = 8  # requests that may wait for the engine
HEADER_TIMEOUT_S = 10  # a connection whose request headers take longer is closed
BODY_TIMEOUT_S = 30  # a request body that takes longer gets 408
KEEP_ALIVE_S = 5  # an idle keep-alive connection is closed after this
MAX_CONNECTIONS = 64  # open connections; a request past them gets 503 at once
MAX_HEADER_BYTES = 16 * 1024  # request line and headers
RETRY_AFTER_WINDOW = 5  # Retry-After: the mean time of this many recent requests, times those ahead
PROMPT_CHARS_PER_TOKEN = 8  # a prompt over n_ctx * this many characters is refused before tokenizing

SAMPLING = {"temperature": TEMPERATURE, "top_k": TOP_K, "top_p": TOP_P, "min_p": MIN_P}

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
# penalties and bias, before the chain above (edgespec/core/penalties.py); these values are "off"
PRESENCE_PENALTY = 0.0  # OpenAI's, -2..2, over the tokens generated so far
FREQUENCY_PENALTY = 0.0  # OpenAI's, -2..2, over the tokens generated so far
REPEAT_PENALTY = 1.0  # llama.cpp's, over the last REPEAT_LAST_N tokens of the context
REPEAT_LAST_N = 64  # llama.cpp's penalty_last_n: 0 = off, -1 = the whole context
REPEAT_PENALTY_RANGE = (0.01, 100.0)  # repeat_penalty within this (beyond it a logit / penalty overflows)
PENALTY_LIMIT = 2.0  # |presence_penalty|, |frequency_penalty| at most this (OpenAI's range)
LOGIT_BIAS_LIMIT = 100.0  # |bias| at most this (OpenAI's range; -100 bans the token in practice)
TOP_LOGPROBS_LIMIT = 20  # most alternatives per token a request may ask log probabilities of

MAX_TOKENS = 256  # tokens generated per request unless asked otherwise
MAX_TOKENS_CAP = 2048  # the most one server request may ask for (--max-tokens-cap)
N_CTX = 4096  # context size of both models
K_LIMIT = 32  # largest fixed K a request or a pair may ask for
K_MAX = K_LIMIT  # largest K the adaptive controller may grow to (it stops where the machine says)
# the most logits rows one eval returns: a verify of K_LIMIT drafts that lookup finished with 16
# more, plus its bonus row (49), or a catch-up check's window (24); llama.cpp sizes its output
# buffers and graphs for this many rows, not a whole batch (a batch of 262k-token rows is 512 MB)
ROWS_MAX = 64

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
# a prompt over n_ctx * this many characters is refused before tokenizing: source code runs 2-4
# characters a token, JSON indented by 8 about 11, separator lines 27; 132k characters of special
# tokens tokenize in 0.2 s (8 refused pasted JSON that would have fit)
PROMPT_CHARS_PER_TOKEN = 32

SAMPLING = {"temperature": TEMPERATURE, "top_k": TOP_K, "top_p": TOP_P, "min_p": MIN_P}
PENALTIES = {
    "presence_penalty": PRESENCE_PENALTY,
    "frequency_penalty": FREQUENCY_PENALTY,
    "repeat_penalty": REPEAT_PENALTY,
    "repeat_last_n": REPEAT_LAST_N,
}

RPC_PORT = 50052  # llama.cpp rpc-server's port
RPC_HOST = "127.0.0.1"  # loopback: rpc-server has no authentication

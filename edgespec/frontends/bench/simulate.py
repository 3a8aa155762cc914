"""A simulated machine: fake target and draft models whose evals take the time a cost curve
says (a real clock) and whose agreement follows an acceptance profile.

Both models follow the `Model` / `TextModel` protocols, so the real `Engine` and decoder
run on them unchanged. The target's next token is a hash of (position, previous token);
the draft proposes the same token with the probability the profile gives at that
position, and its confidence in its token is a noisy hint of whether it agrees (as with
real drafts: sure tokens are accepted more often, not always). Everything is a pure
function of the context, so re-evaluating a cut cache gives the same rows.

Costs: `Curve` is the time of one eval of n tokens, flat up to a knee and then rising
per token (a CPU is a knee of 1; a GPU verifies a batch up to its knee for the price of
one token); `switch_s` is paid when an eval runs on the other model than the last one
(weights evicting each other from a cache); `reshape` is what each model's first two calls
after a change of its batch size cost more (a runtime replaying captured graphs, as
llama.cpp's CUDA backend does). `MACHINES` is the table the bench prints;
`random_machine(seed)` draws others from the same broad ranges (tests judge the
controller on seeds nothing was tuned on).
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np

from edgespec.core.sampling import Heads, Rows

VOCAB = 64  # ids 0..2 special (BOS 1, EOS 2); small, so the decoder's own Python work stays small
NOISE_SD = 2.0  # past VOCAB, the other logits' spread (a row's long tail)
SURE_SPREAD = 1.5  # scale of the logistic noise on the draft's confidence (in logits)
SURE_SHIFT = 2.0  # the confidence's centre, in logits: +2 when the draft agrees, -2 when not


@dataclass(frozen=True)
class Curve:
    """Seconds of one eval of n tokens: `base` up to `knee` tokens, then `rise` x base more
    per token past it."""

    base: float
    knee: int = 1
    rise: float = 0.1

    def __call__(self, n: int) -> float:
        return self.base * (1.0 + self.rise * max(0, n - self.knee))


@dataclass(frozen=True)
class Machine:
    name: str
    target: Curve
    draft: Curve
    switch_s: float = 0.0  # paid by an eval on the other model than the last one
    # a model's eval costs this much more (a share of its cost) on the first two calls after
    # its batch size changed: a GPU runtime that replays a captured graph of the model's
    # kernels (llama.cpp's CUDA graphs) runs the first call without one and captures it on the second
    reshape: float = 0.0
    # the host waits for an eval by spinning (CUDA's default sync, with a core to spare: llama.cpp
    # leaves cudaDeviceScheduleAuto), else asleep (Metal's waitUntilCompleted, a blocking sync),
    # and a host woken from a sleep finds its caches cold
    spins: bool = False


MS = 2e-3  # one plain target step: long enough that the controller's own ~0.1 ms is a few %
# the tuning table: what the bench prints and what the controller was developed against
MACHINES = (
    Machine("cpu", Curve(1.0 * MS, 1, 0.08), Curve(0.25 * MS, 1, 0.15)),
    Machine("cpu-switch", Curve(1.0 * MS, 1, 0.06), Curve(0.2 * MS, 1, 0.15), 0.1 * MS),
    Machine("cpu-dear-draft", Curve(1.0 * MS, 1, 0.1), Curve(0.45 * MS, 1, 0.15)),
    Machine("gpu-knee4", Curve(1.0 * MS, 4, 0.25), Curve(0.12 * MS, 8, 0.1)),
    Machine("gpu-knee8", Curve(1.0 * MS, 8, 0.2), Curve(0.1 * MS, 8, 0.1)),
    Machine("gpu-knee16", Curve(1.0 * MS, 16, 0.15), Curve(0.06 * MS, 16, 0.1), 0.05 * MS),
    # an 8B Q4_0 target and a 4-block draft cut from it on an H200 (docs/bench-history.md, stop 40)
    Machine("gpu-graphs", Curve(1.0 * MS, 2, 0.13), Curve(0.21 * MS, 2, 0.1), 0.0, 0.8),
)


def random_machine(seed: int) -> Machine:
    """A machine drawn from broad ranges: CPU-like or GPU-like, a draft 4-50% of the
    target's cost, a switch cost of 0-15% of a target step."""
    r = random.Random(seed)
    gpu = r.random() < 0.5
    knee = r.choice((2, 4, 8, 12, 16, 24)) if gpu else 1
    rise = r.uniform(0.1, 0.3) if gpu else r.uniform(0.03, 0.15)
    target = Curve(r.uniform(0.75, 1.5) * MS, knee, rise)
    draft = Curve(target.base * r.uniform(0.04, 0.2 if gpu else 0.5), knee, r.uniform(0.05, 0.2))
    return Machine(f"seed{seed}-{'gpu' if gpu else 'cpu'}", target, draft, target.base * r.uniform(0.0, 0.15))


def random_graphs_machine(seed: int) -> Machine:
    """A GPU-like machine from `random_machine` (the first GPU-like one from seed, seed + 100,
    ...) whose models pay a drawn rebuild of 0.4-1.0 of a call after a change of batch size
    (CUDA graphs; an H200 measured 0.8): the machines the controller's handling of rebuilds
    is judged on (none was tuned on)."""
    s, m = seed, random_machine(seed)
    while not m.name.endswith("gpu"):
        s += 100
        m = random_machine(s)
    return replace(m, name=f"graphs{seed}", reshape=random.Random(seed * 7919).uniform(0.4, 1.0))


# acceptance profiles: the probability the draft agrees with the target at a position
Profile = Callable[[int], float]


def steady(a: float) -> Profile:
    return lambda pos: a


def switching(high: float, low: float, every: int) -> Profile:
    """Text that turns every `every` tokens between easy (prose the draft predicts) and hard."""
    return lambda pos: high if (pos // every) % 2 == 0 else low


PROFILES: dict[str, Profile] = {
    "steady-0.9": steady(0.9),
    "steady-0.6": steady(0.6),
    "switch-96": switching(0.95, 0.25, 96),
}
TEXTS = 4  # texts per round of the bench: one text is one draw of where the draft disagrees


def _unit(*xs: int) -> float:
    """A uniform number in [0, 1) hashed from integers (splitmix64's finaliser)."""
    h = 0x9E3779B97F4A7C15
    for x in xs:
        h = (h ^ (x & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 31
        h = h * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        h ^= h >> 29
    return (h >> 11) / float(1 << 53)


class VirtualClock:
    """Time that passes only while a simulated model evaluates: the controller's decisions
    judged without the host's noise or the Python around them. A stand-in for the `time`
    module (tests put it in place of the decoder's); the bench uses the real clock."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


class World:
    """The text both models see, and the machine's clock (which model ran last)."""

    def __init__(
        self,
        machine: Machine,
        profile: Profile,
        seed: int = 0,
        clock: VirtualClock | None = None,
        vocab: int = VOCAB,
    ) -> None:
        self.machine, self.profile, self.seed, self.clock = machine, profile, seed, clock
        self.vocab = vocab
        self.last: str | None = None
        self.shape = {"target": (0, 0), "draft": (0, 0)}  # per model: (last batch size, calls at it in a row)
        self.text: list[int] = []  # the target's cache: the text so far (where a draft's window sits)

    def target_token(self, pos: int, prev: int) -> int:
        return 3 + int(_unit(self.seed, pos, prev, 1) * (self.vocab - 3))

    def draft_token(self, pos: int, prev: int) -> tuple[int, float]:
        """(the draft's token, its confidence in it) for the token at `pos`."""
        want = self.target_token(pos, prev)
        agree = _unit(self.seed, pos, prev, 2) < self.profile(pos)
        v = self.vocab
        token = want if agree else 3 + (want - 3 + 1 + int(_unit(self.seed, pos, prev, 3) * (v - 4))) % (v - 3)
        u = min(max(_unit(self.seed, pos, prev, 4), 1e-9), 1 - 1e-9)
        z = (SURE_SHIFT if agree else -SURE_SHIFT) + SURE_SPREAD * math.log(u / (1 - u))
        return token, 1.0 / (1.0 + math.exp(-z))

    def wait(self, who: str, n: int, since: float) -> None:
        """Hold the caller until the eval's cost has passed on the wall clock, asleep unless the
        machine spins: on a busy shared machine a sleeper is woken sooner than a spinner is
        rescheduled (the sleep overshoots by some 0.07 ms, the same for every K: part of the machine)."""
        curve = self.machine.target if who == "target" else self.machine.draft
        cost = curve(n) + (self.machine.switch_s if self.last not in (None, who) else 0.0)
        last, calls = self.shape[who]
        calls = calls + 1 if n == last else 1
        self.shape[who] = (n, calls)
        if calls <= 2:
            cost += self.machine.reshape * curve(n)
        self.last = who
        if self.clock is not None:
            self.clock.now += cost
            return
        end = since + cost
        if self.machine.spins:
            while time.perf_counter() < end:
                pass
        elif (left := end - time.perf_counter()) > 0:
            time.sleep(left)


class SimModel:
    """One of the two fake models (`who`: "target" or "draft") over a shared `World`.

    At the default vocabulary every other logit is 0; past it (a large-vocabulary machine,
    for what the sampling transform costs) they are fixed normal noise, so a row has a long
    tail of small weights as real rows do. `busy_s` counts the seconds spent in `eval`
    (the machine's cost included): the rest of a generation's time is the runtime's own.

    A row depends on the text position of the token it follows, not on where that token
    sits in the cache: a draft that reads a window of text after a stretch it skipped (a
    check of a long lag, Decoder._catch_up) predicts that text as it would in place, as a
    real model predicts from the tokens it read (`_at`)."""

    add_bos, bos_id, eos_id = True, 1, 2

    def __init__(self, world: World, who: str, n_ctx: int = 4096) -> None:
        self.world, self.who = world, who
        self.n_vocab, self.n_ctx = world.vocab, n_ctx
        self.kv: list[int] = []
        self.at: list[int] = []  # the text position of each token in the cache
        if who == "target":
            world.text = self.kv
        self.busy_s = 0.0
        self._base_top = np.zeros(0, dtype=np.int64)  # the base row's largest ids, for _heads
        self.head_k = 0  # set_head: rows as their top-k, found inside the eval (as a GPU backend would)
        self._out = np.zeros((64, self.n_vocab), dtype=np.float32)
        self._base = np.zeros(self.n_vocab, dtype=np.float32)
        if self.n_vocab > VOCAB:
            noise = np.random.default_rng([world.seed, who == "target"]).normal(size=self.n_vocab) * NOISE_SD
            self._base = noise.astype(np.float32)
        self._weight = np.exp(self._base.astype(np.float64))  # each token's weight in the base row
        self._base_total = float(self._weight.sum())

    def _raised(self) -> tuple[int, np.float32]:
        """The row after the cache's last token: the base row with one token raised to this logit."""
        pos, prev = self.at[-1] + 1, self.kv[-1]
        if self.who == "target":
            return self.world.target_token(pos, prev), np.float32(30.0)  # the target is sure: p is one-hot-like
        token, sure = self.world.draft_token(pos, prev)
        rest = self._base_total - float(self._weight[token])
        return token, np.float32(math.log(sure * rest / (1.0 - sure)))  # softmax(row)[token] == sure

    def _heads(self, raised: list[tuple[int, np.float32]]) -> Heads:
        """Each row's head_k largest logits: among the base row's largest and the raised token
        (every other logit is the base's), so a few dozen are compared and no whole row is
        written: with a GPU backend's top-k, only the head ever reaches the host's memory."""
        k = self.head_k
        if self._base_top.size <= k:
            self._base_top = np.argsort(-self._base, kind="stable")[: 2 * k + 1]
        ids = np.empty((len(raised), k), dtype=np.int32)
        vals = np.empty((len(raised), k), dtype=np.float32)
        for i, (token, logit) in enumerate(raised):
            cands = np.union1d(self._base_top[: k + 1], [token])
            row = self._base[cands]
            row[cands == token] = logit
            order = np.argsort(-row, kind="stable")[:k]
            ids[i], vals[i] = cands[order], row[order]
        return Heads(ids, vals)

    def eval(self, tokens: Sequence[int], pos: int, logits_from: int | None = None) -> Rows:
        t0 = time.perf_counter()
        if pos != len(self.kv):
            raise RuntimeError(f"eval at {pos} but the cache holds {len(self.kv)}")
        n_rows = 0 if logits_from is None else len(tokens) - logits_from
        at = self._at(tokens, pos)
        raised = []
        for i, t in enumerate(tokens):
            self.kv.append(int(t))
            self.at.append(at + i)
            if logits_from is not None and i >= logits_from:
                raised.append(self._raised())
        rows: Rows
        if self.head_k and n_rows:
            rows = self._heads(raised)
        else:
            out = self._out if n_rows <= len(self._out) else np.zeros((n_rows, self.n_vocab), dtype=np.float32)
            for row, (token, logit) in zip(out, raised):
                row[:] = self._base
                row[token] = logit
            rows = out[:n_rows]
        self.world.wait(self.who, len(tokens), t0)
        self.busy_s += time.perf_counter() - t0
        return rows

    def set_head(self, k: int) -> bool:
        """Rows as the top-k of each (`Heads`) from now on; 0: whole rows. The top-k is part of
        the eval's time, as a GPU backend's top-k is part of its step."""
        self.head_k = max(0, min(k, self.n_vocab - 1))
        return True

    def trim(self, n_keep: int) -> None:
        del self.kv[n_keep:]
        del self.at[n_keep:]

    def _at(self, tokens: Sequence[int], pos: int) -> int:
        """The text position of `tokens` evaluated at cache position `pos`: `pos`, unless a draft
        reads text that is not there in the target's cache (a window past a skipped stretch):
        then the latest place the target's cache holds them."""
        text, n, want = self.world.text, len(tokens), list(tokens)
        if self.who == "target" or pos + n > len(text) or text[pos : pos + n] == want:
            return pos
        for start in range(len(text) - n, pos, -1):
            if text[start : start + n] == want:
                return start
        return pos

    def is_eog(self, token: int) -> bool:
        return token == self.eos_id

    def tokenize(self, text: str, *, add_special: bool, parse_special: bool) -> list[int]:
        ids = [3 + sum(w.encode()) % (self.n_vocab - 3) for w in text.split()]
        return ([self.bos_id] if add_special else []) + ids

    def piece(self, token: int, special: bool = False) -> bytes:
        return b"" if token < 3 and not special else f"t{token} ".encode()

    def token_text(self, token: int) -> str:
        return f"t{token} "

    def chat_template(self) -> str | None:
        return "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def pair(
    machine: Machine, profile: Profile, seed: int = 0, clock: VirtualClock | None = None, vocab: int = VOCAB
) -> tuple[SimModel, SimModel]:
    """(target, draft) on one simulated machine: `Engine(*pair(...), lookup=False)`."""
    world = World(machine, profile, seed, clock, vocab)
    return SimModel(world, "target"), SimModel(world, "draft")

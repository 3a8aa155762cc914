"""Saved chats: one JSON file per conversation under `$EDGESPEC_HOME/chats/`.

The chat writes its file whenever the conversation changes (a message sent, a
reply finished), through a temporary file and `os.replace`, so a crash of
anything (the engine, the app, the machine) leaves the last complete version:
at most the reply in progress is lost. `edgespec chat --list` prints the saved
chats, `--resume [ID]` reopens one (the most recent without an ID).

A file: {"id", "created", "updated" (ISO times), "model", "messages": [{"role", "content"}]}.
"""

from __future__ import annotations

import json
import os
import secrets
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from edgespec import EdgespecError
from edgespec.llama.config import home

WORDS = 8  # of the first message, in --list


def chats_dir() -> Path:
    return home() / "chats"


@dataclass
class SavedChat:
    id: str
    messages: list[dict[str, str]] = field(default_factory=list)
    model: str = ""
    created: str = ""
    updated: str = ""

    def summary(self) -> str:
        """One line for --list: id, time, the first words."""
        first = next((m["content"] for m in self.messages if m["role"] == "user"), "")
        words = " ".join(first.split()[:WORDS])
        more = "…" if len(first.split()) > WORDS else ""
        when = self.updated[:16].replace("T", " ")
        return f"{self.id}  {when}  {len(self.messages):3d} messages  {words}{more}"


class ChatFile:
    """The file of one conversation; `save` replaces it whole."""

    def __init__(self, directory: Path, chat: SavedChat | None = None, model: str = "") -> None:
        self.directory = directory
        now = _now()
        self.chat = chat or SavedChat(f"{datetime.now():%Y%m%d-%H%M%S}-{secrets.token_hex(2)}", [], model, now, now)

    @property
    def path(self) -> Path:
        return self.directory / f"{self.chat.id}.json"

    def save(self, messages: list[dict[str, str]]) -> None:
        """Write the conversation atomically; OSError when the disk says no."""
        if not messages:
            return
        self.chat.messages = [{"role": m["role"], "content": m["content"]} for m in messages]
        self.chat.updated = _now()
        self.directory.mkdir(parents=True, exist_ok=True)
        data = json.dumps(self.chat.__dict__, ensure_ascii=False, indent=1)
        fd, tmp = tempfile.mkstemp(dir=self.directory, prefix=f".{self.chat.id}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise


def list_chats(directory: Path | None = None) -> list[SavedChat]:
    """Saved chats, the most recently updated first (unreadable files are skipped: `read_chats`)."""
    return read_chats(directory)[0]


def read_chats(directory: Path | None = None) -> tuple[list[SavedChat], dict[str, str]]:
    """The saved chats, the most recently updated first, and the files that could not be read
    (id -> why: a bad edit, a disk error)."""
    directory = directory or chats_dir()
    try:
        there = next(d for d in (directory, *directory.parents) if d.exists())  # the nearest that exists
    except OSError as err:  # a folder on the way that cannot be entered
        raise EdgespecError(f"cannot read {directory}: {err.strerror or err}") from err
    if not there.is_dir():
        raise EdgespecError(f"{there} is not a folder, so {directory} cannot hold chats; set EDGESPEC_HOME to a folder")
    chats, bad = [], {}
    for path in directory.glob("*.json"):
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
            messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in raw["messages"]]
            chat = SavedChat(path.stem, messages, *(_text(raw, key) for key in ("model", "created", "updated")))
        except (OSError, ValueError, KeyError, TypeError) as err:
            bad[path.stem] = f"{type(err).__name__}: {err}"
            continue
        chats.append(chat)
    return sorted(chats, key=lambda c: (c.updated, c.id), reverse=True), bad


def find_chat(
    chat_id: str | None, directory: Path | None = None, warn: Callable[[str], None] | None = None
) -> SavedChat:
    """The chat `chat_id` (or a unique start of it); None: the most recent, with `warn` told of
    any file written after it that cannot be read (the chat meant may be that one)."""
    directory = directory or chats_dir()
    chats, bad = read_chats(directory)
    if chat_id is not None:
        found = [chats[i] for i in _matching([c.id for c in chats], chat_id)]
        broken = [list(bad)[i] for i in _matching(list(bad), chat_id)]
        if not found and len(broken) == 1:
            path = directory / f"{broken[0]}.json"
            raise EdgespecError(f"the saved chat {path} cannot be read ({bad[broken[0]]}); fix or remove the file")
    if not chats:
        raise EdgespecError(f"no saved chats in {directory}; start one with `edgespec chat`")
    if chat_id is None:
        newest = _mtime(directory / f"{chats[0].id}.json")
        for broken, why in bad.items() if warn is not None else ():
            path = directory / f"{broken}.json"
            if _mtime(path) > newest:
                warn(f"the saved chat {path} is newer but cannot be read ({why}); resuming {chats[0].id}")
        return chats[0]
    if len(found) != 1:
        what = "no saved chat" if not found else f"{len(found)} saved chats"
        raise EdgespecError(f"{what} with id {chat_id!r}; `edgespec chat --list` shows them")
    return found[0]


def _text(raw: dict, key: str) -> str:
    """A text field of a chat file ("" where it is missing); another kind of value is a bad file."""
    value = raw.get(key, "")
    if not isinstance(value, str):
        raise TypeError(f"{key!r} is {type(value).__name__}, not text")
    return value


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _matching(ids: list[str], chat_id: str) -> list[int]:
    """Indices of the ids equal to `chat_id`, else of those that start with it."""
    return [i for i, x in enumerate(ids) if x == chat_id] or [i for i, x in enumerate(ids) if x.startswith(chat_id)]


def markdown_path(path: str | None, save_dir: Path) -> Path:
    """Where `/save PATH` writes: PATH (a relative one under `save_dir`), else a dated name there."""
    if path is None:
        return save_dir / f"edgespec-chat-{datetime.now():%Y%m%d-%H%M%S}.md"
    target = Path(path).expanduser()
    return target if target.is_absolute() else save_dir / target


def write_file(target: Path, text: str) -> None:
    """Write `text` to `target`, making its folders; OSError when the disk says no."""
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(text, encoding="utf-8")


def _now() -> str:
    return datetime.now().isoformat(timespec="seconds")

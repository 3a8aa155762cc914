"""Text out of token ids: whole UTF-8 characters, stop strings held back, segments by source."""

from __future__ import annotations

from edgespec.core.detok import TextAssembler
from edgespec.core.events import Segment

PIECES = {5: "é".encode()[:1], 6: "é".encode()[1:] + b"!", 7: b"ok", 8: b" END", 9: b"x"}


def test_a_character_belongs_to_the_token_that_completes_it() -> None:
    text = TextAssembler(PIECES.__getitem__)
    assert text.feed([5], ["draft"]) == ([], None)  # half a character: nothing yet
    assert text.feed([6, 7], ["draft", "target"]) == ([Segment("é!", "draft"), Segment("ok", "target")], None)


def test_segments_join_to_the_released_text_across_held_stop_prefixes() -> None:
    text = TextAssembler(PIECES.__getitem__, stop=["okay"])
    segs, stop = text.feed([7], ["draft"])  # "ok" may become "okay": held back
    assert segs == [] and stop is None
    segs, stop = text.feed([9, 7], ["target", "draft"])  # "okx" cannot: released, "ok" held again
    assert segs == [Segment("ok", "draft"), Segment("x", "target")] and stop is None
    assert text.finish() == [Segment("ok", "draft")]


def test_a_stop_string_cuts_the_segments_where_it_starts() -> None:
    text = TextAssembler(PIECES.__getitem__, stop=[" END"])
    segs, stop = text.feed([7, 8, 9], ["draft", "target", "target"])
    assert segs == [Segment("ok", "draft")] and stop == 1

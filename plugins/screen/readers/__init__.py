"""Reward and done from the screen: readers of a captured frame's regions, for games with no API.

* :class:`NumberReader` (:mod:`.number`): a score, timer or count drawn as text, by glyph templates
  (:mod:`.glyphs`: cut from labelled frames with :func:`cut_glyphs`, loaded with :func:`load_glyphs`
  from a folder of PNGs or an npz/json of masks, or drawn from a font with :func:`render_glyphs`);
* :class:`MatchReader` (:mod:`.match`): a region like a reference picture ("game over"), or not
  like it ("screen changed");
* :class:`LivesReader` (:mod:`.lives`): how many times an icon is drawn in a region;
* :class:`BarReader` (:mod:`.bar`): the filled fraction of a bar;
* :class:`StillReader` (:mod:`.still`): whether a region has stopped changing (a game that just
  stops at its end).

Each reads ``reader.read(frame) -> Reading`` (an unreadable frame keeps the last value, says so,
and is counted in ``reader.unreadable``) and checks the first frame with ``check_start(frame)``.
``[env.kwargs.reward]`` tables build them without Python (:mod:`..reward_config`); a custom reward
function uses them directly::

    from mqttrl_plugins.screen.readers import NumberReader   # or: from mqttrl.plugin import NumberReader

    class Reward:
        def __init__(self):
            self.score = NumberReader([520, 12, 90, 20], "glyphs/")

        def reset(self, frame):
            self.score.read(frame)

        def __call__(self, frame):
            before = self.score.value
            now = self.score.read(frame).value
            return float(now - before), False
"""

from .bar import BarReader
from .base import Reader, Reading, Unreadable, read_png, write_png
from .glyphs import Glyph, cut_glyphs, load_glyphs, render_glyphs, save_glyphs
from .lives import LivesReader
from .match import MatchReader
from .number import NumberReader, parse_number
from .still import StillReader

__all__ = [
    "BarReader",
    "Glyph",
    "LivesReader",
    "MatchReader",
    "NumberReader",
    "Reader",
    "Reading",
    "StillReader",
    "Unreadable",
    "cut_glyphs",
    "load_glyphs",
    "parse_number",
    "read_png",
    "render_glyphs",
    "save_glyphs",
    "write_png",
]

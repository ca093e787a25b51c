"""What is wrong in a TOML file that does not parse, named where the eye cannot see it.

A config saved by an editor that writes a byte-order mark, or with a no-break space pasted from a
web page, fails with tomllib's "Invalid statement (at line 1, column 1)": true, but the character is
invisible in every editor. :func:`toml_error_line` names it, with what to do about it.
"""

from __future__ import annotations

import re
import tomllib
import unicodedata

#: tomllib (Python 3.11-3.13) puts the position only in the message
_AT = re.compile(r"\(at line (\d+), column (\d+)\)")


def invisible(ch: str) -> bool:
    """A character that shows as a space or as nothing: a space other than ' ', a format character
    (byte-order mark, zero-width space), a control character other than tab and newlines."""
    category = unicodedata.category(ch)
    return (category == "Zs" and ch != " ") or category == "Cf" or (category == "Cc" and ch not in "\t\n\r")


def _position(error: tomllib.TOMLDecodeError) -> tuple[int, int] | None:
    lineno, colno = getattr(error, "lineno", None), getattr(error, "colno", None)  # Python 3.14 has them
    if isinstance(lineno, int) and isinstance(colno, int):
        return lineno, colno
    m = _AT.search(str(error))
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_invisible(text: str, error: tomllib.TOMLDecodeError) -> tuple[str, int, int] | None:
    """The invisible character the error stopped at (or the first one on its line), with its line
    and column (1-based), or None when there is none there."""
    at = _position(error)
    if at is None:
        return None
    lines = text.split("\n")
    lineno, colno = at
    if not 1 <= lineno <= len(lines):
        return None
    line = lines[lineno - 1]
    if 1 <= colno <= len(line) and invisible(line[colno - 1]):
        return line[colno - 1], lineno, colno
    col = next((i for i, ch in enumerate(line) if invisible(ch)), None)
    return None if col is None else (line[col], lineno, col + 1)


def toml_error_line(path: object, text: str, error: tomllib.TOMLDecodeError) -> str:
    """One line for a TOML file that does not parse; an invisible character is named, with its fix."""
    found = find_invisible(text, error)
    if found is None:
        return f"{path} is not valid TOML: {error}"
    ch, lineno, colno = found
    code = f"U+{ord(ch):04X}"
    name = unicodedata.name(ch, "an unnamed character")
    if ch == "\ufeff" and lineno == 1 and colno == 1:
        return (
            f"{path} is not valid TOML: it starts with a byte-order mark ({code}), which TOML does not allow: "
            f"save it as UTF-8 without a BOM"
        )
    fix = "replace it with a plain space" if unicodedata.category(ch) == "Zs" else "delete it"
    return f"{path} is not valid TOML: {code} {name} (invisible) at line {lineno}, column {colno}: {fix}"

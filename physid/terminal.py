"""Terminal output: every message is printed as the text it is.

physid's own lines colour a word with rich markup (``[green]wrote[/green]``), but the messages
they carry come from files, specs and errors: ``[fixed.m] must be positive``, ``[scene] and
[markers]``, ``[method] h``. Rich reads any such bracket as a style tag and drops it, losing
the most important part of the message. Here only the colour tags physid itself writes are
markup; every other bracket is printed as it is (``Console``), and ``plain`` gives the text
of a line without its colour tags (for log files).
"""

from __future__ import annotations

import re

from rich.console import Console as _RichConsole
from rich.text import Text

# The words physid's own markup is made of ("[bold red]", "[/yellow]", "[/]").
STYLE_WORDS = frozenset(
    {"red", "green", "yellow", "blue", "magenta", "cyan", "white", "bold", "dim", "italic"}
)
_BRACKET = re.compile(r"(\\*)\[([^\[\]\n]*)\]")


def _is_style_tag(inner: str) -> bool:
    words = inner.removeprefix("/").split()
    return inner == "/" or (bool(words) and all(w in STYLE_WORDS for w in words))


def escape_unknown(text: str) -> str:
    """``text`` with every bracket that is not one of physid's colour tags escaped, so rich
    prints it literally (already escaped brackets are left alone)."""

    def fix(m: re.Match) -> str:
        slashes, inner = m.group(1), m.group(2)
        if len(slashes) % 2 or _is_style_tag(inner):
            return m.group(0)
        return f"{slashes}\\[{inner}]"

    return _BRACKET.sub(fix, text)


def plain(text: str) -> str:
    """The text of a console line: physid's colour tags removed, escapes undone."""

    def drop(m: re.Match) -> str:
        slashes, inner = m.group(1), m.group(2)
        if len(slashes) % 2:
            return f"{slashes[:-1]}[{inner}]"
        return slashes if _is_style_tag(inner) else m.group(0)

    return _BRACKET.sub(drop, text)


class Console(_RichConsole):
    """A rich console on which only physid's colour tags are markup (see the module
    docstring); everything else in a printed string appears exactly as written."""

    def render_str(self, text: str, *, markup: bool | None = None, **kwargs) -> Text:
        if markup if markup is not None else self._markup:
            text = escape_unknown(text)
        return super().render_str(text, markup=markup, **kwargs)


def error_line(label: str, message: str, style: str = "red") -> Text:
    """``label: message`` with the label coloured and the message verbatim."""
    return Text.assemble((f"{label}:", style), " ", message)

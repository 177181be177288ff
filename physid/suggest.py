""" "Did you mean ...?" for misspelled names (rig names, spec keys, columns, options)."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(word: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The choices that look like ``word`` (case and ``-``/``_`` ignored), best first."""
    choices = list(choices)
    folded = {c.lower().replace("-", "_"): c for c in choices}
    found = difflib.get_close_matches(word.lower().replace("-", "_"), folded, n=n, cutoff=0.6)
    return [folded[f] for f in found]


def did_you_mean(word: str, choices: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest choice, or ``""`` when none is close."""
    found = close_matches(word, choices, n=1)
    return f" (did you mean {found[0]!r}?)" if found else ""

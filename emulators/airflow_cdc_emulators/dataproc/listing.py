"""What List calls share: page tokens and the ``field = value AND ...`` filters.

A page token is the position of the page's first item, as decimal text; a token the emulator
did not hand out is INVALID_ARGUMENT. Filters are clauses ``name = value`` (``value`` bare or
in double quotes, ``*`` for "any value") joined by ``AND`` (or ``and``) or by spaces; other
operators are INVALID_ARGUMENT naming the clause.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

from .errors import invalid_argument

T = TypeVar("T")

_CLAUSE = re.compile(r'\s*([A-Za-z_][\w.\-]*)\s*=\s*("[^"]*"|[^\s"]+)\s*')
_JOINER = re.compile(r"\s*(?:AND|and)\s+|\s+|$")


def page(
    items: Sequence[T], page_size: int, page_token: str, *, default_size: int, max_size: int = 1000
) -> tuple[list[T], str]:
    """The page of ``items`` a request asks for and the token of the next one ("" at the end)."""
    if page_size < 0:
        raise invalid_argument("page_size", page_size, "use 0 (the default size) or more")
    size = min(page_size or default_size, max_size)
    if page_token:
        if not page_token.isdigit() or int(page_token) > len(items):
            raise invalid_argument(
                "page_token", page_token, "pass the next_page_token of the previous page"
            )
        start = int(page_token)
    else:
        start = 0
    end = start + size
    return list(items[start:end]), (str(end) if end < len(items) else "")


def parse_filter(text: str, field: str = "filter") -> list[tuple[str, str]]:
    """``[(name, value), ...]`` of a filter such as ``status.state = ACTIVE AND labels.env = x``."""
    clauses, position = [], 0
    text = text.strip()
    while position < len(text):
        match = _CLAUSE.match(text, position)
        if match is None:
            raise invalid_argument(
                field,
                text,
                f"cannot read the clause at {text[position:]!r}: the emulator understands "
                f"'name = value' clauses joined by AND",
            )
        clauses.append((match.group(1), match.group(2).strip('"')))
        position = match.end()
        joiner = _JOINER.match(text, position)
        position = joiner.end() if joiner else position
    return clauses

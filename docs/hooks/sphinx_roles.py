"""MkDocs hook: the Sphinx cross-reference roles of docstrings as links.

The provider's docstrings are Sphinx-style, as Airflow's providers' are (``:class:`~a.b.C```),
and mkdocstrings renders their text as Markdown, leaving the role in front of the code span.
Each role becomes an optional autorefs reference: a link where the object is on a page of the
site, plain code where it is not (a private module), never a warning. ``~`` keeps only the
last part of the name, as Sphinx shows it.
"""

from __future__ import annotations

import re

# A docstring may wrap a long name inside its backquotes: the name is the text without blanks.
ROLE = re.compile(
    r":(?:py:)?(?:class|func|meth|mod|attr|data|exc|obj|const):<code>(~?)(\w[\w.\s]*?)(\(\))?</code>"
)


def _reference(match: re.Match) -> str:
    short, wrapped, call = match.groups()
    target = re.sub(r"\s+", "", wrapped)
    shown = target.rsplit(".", 1)[-1] if short else target
    return f'<autoref identifier="{target}" optional><code>{shown}{call or ""}</code></autoref>'


def on_page_content(html: str, **_: object) -> str:
    """The page's HTML with every role turned into a reference."""
    return ROLE.sub(_reference, html)

"""MkDocs hook: the docstrings' Sphinx roles become code links in the API reference, and
inline code keeps its tokens whole.

symgrad's docstrings cross-reference with Sphinx roles (``:class:`~symgrad.errors.ShapeError```,
``:func:`compile```), which Markdown renders as the raw text ``:class:ShapeError``. This hook
turns each role into ``<code>`` text (the last component for ``~name``, as Sphinx shows it)
wrapped in an optional cross-reference that mkdocs-autorefs resolves to the object's heading
when the API reference documents it. A name given without its module (``CompileOptions``)
is looked up among the page's headings by its last component.

Browsers end a line after a hyphen and some other punctuation, which split inline code such
as ``-fno-trapping-math`` or ``[--backend`` in two; each token of inline code (what lies
between its spaces) with such a character is wrapped in ``<span class="nobreak">``, which
the stylesheet keeps on one line. Inline code still wraps at its spaces.
"""
from __future__ import annotations

import html
import re

ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):<code>(?P<target>[^<]+)</code>")
HEADING_ID = re.compile(r'<h\d id="(?P<id>symgrad\.[A-Za-z0-9_.]+)"')
INLINE_CODE = re.compile(r"<code>(?P<text>[^<]*)</code>")    # code blocks hold tags: not these
BREAKABLE_TOKEN = re.compile(r"[^\s]*[^\w\s][^\s]*")         # has a character to break after


def documented(page_html: str) -> tuple[set, dict]:
    """The identifiers of the page's headings, and last component -> identifier for the
    names documented once on the page."""
    identifiers = {match["id"] for match in HEADING_ID.finditer(page_html)}
    by_name: dict = {}
    for identifier in identifiers:
        by_name.setdefault(identifier.rsplit(".", 1)[-1], set()).add(identifier)
    return identifiers, {name: ids.pop() for name, ids in by_name.items() if len(ids) == 1}


def replace_roles(page_html: str) -> str:
    """``page_html`` with every Sphinx role rendered as an (optional) autoref to code."""
    identifiers, by_name = documented(page_html)

    def link(match):
        target = html.unescape(match["target"]).strip()
        shown = target.lstrip("~")
        if target.startswith("~"):
            shown = shown.rsplit(".", 1)[-1]
        identifier = target.lstrip("~.")
        if identifier not in identifiers:   # symgrad.compile, CompileOptions: by last name
            identifier = by_name.get(identifier.rsplit(".", 1)[-1], identifier)
        return (f'<autoref identifier="{html.escape(identifier)}" optional>'
                f"<code>{html.escape(shown)}</code></autoref>")

    return ROLE.sub(link, page_html)


def keep_tokens_whole(page_html: str) -> str:
    """``page_html`` with each token of inline code that holds punctuation in a
    ``<span class="nobreak">``."""
    def whole(match):
        text = BREAKABLE_TOKEN.sub(r'<span class="nobreak">\g<0></span>', match["text"])
        return f"<code>{text}</code>"

    return INLINE_CODE.sub(whole, page_html)


def on_page_content(html_text, page, config, files):  # noqa: ARG001  (MkDocs hook signature)
    return keep_tokens_whole(replace_roles(html_text))

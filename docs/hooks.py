"""MkDocs hooks of the docs site (mkdocs.yml `hooks:`): the configuration reference is written into its page at
build time from the schema, conf/ and the knobs (`pipeline.config.reference`), and the table of the knobs' memory
terms from the knobs (`Knob.term_text`), so neither can drift from what the tool accepts and predicts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- generated: configuration reference -->"
TERMS = "<!-- generated: memory terms -->"


def terms_table() -> str:
    """Each speed knob's memory term in words, and beside what it holds, a row a knob with a term (in the registry's
    order)."""
    from pipeline import knobs

    rows = [f"| `{k.key}` | {k.term_text[0]} | {k.term_text[1]} |" for k in knobs.registry() if k.term_text]
    return "\n".join(["| knob | its term | beside |", "|---|---|---|", *rows])


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The reference and the table of terms in place of their markers, on the pages that hold them."""
    if MARKER not in markdown and TERMS not in markdown:
        return markdown
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from pipeline.config import reference

    if MARKER in markdown:
        markdown = markdown.replace(MARKER, reference.markdown())
    return markdown.replace(TERMS, terms_table())

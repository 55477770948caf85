"""MkDocs hooks of the docs site (mkdocs.yml `hooks:`): the configuration reference is written into its page at
build time from the schema, conf/ and the knobs (`pipeline.config.reference`), so it cannot drift from what the tool
accepts."""

from __future__ import annotations

import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MARKER = "<!-- generated: configuration reference -->"


def on_page_markdown(markdown: str, page, config, files) -> str:
    """The reference in place of its marker, on the page that holds it."""
    if MARKER not in markdown:
        return markdown
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from pipeline.config import reference

    return markdown.replace(MARKER, reference.markdown())

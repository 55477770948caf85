"""The system's Chromium for browser tests (Playwright's own browser download is not used), and where
`make screenshots` keeps what they see."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.helpers.cli import REPO

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = [
    "--no-sandbox",  # runs as root in containers
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def screenshots_folder() -> Path | None:
    """`BATCH_SPLIT_SCREENSHOTS=docs` (`make screenshots`): the browser tests save what they see there."""
    folder = os.environ.get("BATCH_SPLIT_SCREENSHOTS")
    return (REPO / folder) if folder else None

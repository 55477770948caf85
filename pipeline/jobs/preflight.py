"""Checks made in the parent just before a job starts, for what only the network can tell: a hub model or dataset
that cannot be reached fails its job in a few seconds with one line, instead of minutes of retries and a traceback.
A hub id found in the local cache runs offline when the hub is out of reach."""

from __future__ import annotations

import functools
import os
import urllib.error
import urllib.request
from pathlib import Path

from huggingface_hub import constants as hub

from pipeline.config.choices import DataKind, ModelSource
from pipeline.config.schema import Config

OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
TIMEOUT_S = 3.0


def hub_ids(cfg: Config) -> list[tuple[str, str, str]]:
    """(config field, repo type, id) of what the job would fetch from the hub; local folders are not hub ids."""
    found = []
    data, model = cfg.data, cfg.model
    if data.kind == DataKind.HUB and not Path(str(data.name)).expanduser().exists():
        found.append(("data.name", "datasets", str(data.name)))
    if model.source == ModelSource.PRETRAINED and not Path(str(model.name_or_path)).expanduser().exists():
        found.append(("model.name_or_path", "models", str(model.name_or_path)))
    return found


def cached(repo_type: str, repo_id: str) -> bool:
    """Whether a copy of `repo_id` is in the local Hugging Face caches (hub snapshots, or datasets' own cache)."""
    folder = f"{repo_type}--{repo_id.replace('/', '--')}"
    if (Path(hub.HF_HUB_CACHE) / folder / "snapshots").is_dir():
        return True
    datasets_cache = Path(os.environ.get("HF_DATASETS_CACHE", Path(hub.HF_HOME) / "datasets"))
    return repo_type == "datasets" and any(datasets_cache.glob(f"{repo_id.replace('/', '___')}*"))


@functools.cache
def reachable(endpoint: str, timeout_s: float = TIMEOUT_S) -> bool:
    """Whether the hub answers at all within `timeout_s` (any HTTP status counts as an answer)."""
    try:
        urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=timeout_s).close()
    except urllib.error.HTTPError:
        return True
    except (OSError, ValueError):
        return False
    return True


def check_hub(cfg: Config) -> tuple[str | None, dict[str, str]]:
    """(one-line error or None, environment for the job). Offline (HF_HUB_OFFLINE=1) or out of reach, a cached copy
    is used offline; anything else cannot run."""
    ids = hub_ids(cfg)
    if not ids:
        return None, {}
    missing = [(field, kind, repo) for field, kind, repo in ids if not cached(kind, repo)]
    offline = os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes")
    if offline:
        if missing:
            field, _, repo = missing[0]
            return f"{field}: '{repo}' is not in the local cache, and HF_HUB_OFFLINE is set", {}
        return None, {}
    if reachable(hub.ENDPOINT):
        return None, {}
    if missing:
        field, _, repo = missing[0]
        return f"{field}: the hub ({hub.ENDPOINT}) cannot be reached, and '{repo}' is not in the local cache", {}
    return None, dict(OFFLINE_ENV)

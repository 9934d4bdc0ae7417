"""Atomic checkpoints that refuse to resume a different configuration."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch

from itervision.errors import UserError
from itervision.io import atomic_path


def config_fingerprint(*parts) -> str:
    """A short hash of everything that defines a run (model config, train params, data manifest, seed)."""
    blob = json.dumps(parts, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def save_checkpoint(path: str | Path, state: dict) -> None:
    with atomic_path(path) as tmp:
        torch.save(state, tmp)


def load_checkpoint(path: str | Path, fingerprint: str | None = None) -> dict | None:
    """The checkpoint at `path`, or None if absent or written for another configuration."""
    path = Path(path)
    if not path.exists():
        return None
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated or foreign file
        raise UserError(f"checkpoint {path} is unreadable ({type(err).__name__}); delete it to start over") from None
    if fingerprint is not None and state.get("fingerprint") != fingerprint:
        return None
    return state


def load_weights(path: str | Path) -> dict:
    path = Path(path)
    if not path.exists():
        raise UserError(f"weights {path} not found; run the training stage first")
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:
        raise UserError(f"weights {path} are unreadable ({type(err).__name__}); re-run training") from None

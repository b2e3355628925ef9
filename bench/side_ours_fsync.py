"""Our reference with `fsync_interval=0`: every checkpoint is fsynced before it is
acknowledged (power-loss durable one by one), to show what that costs next to the default."""

from __future__ import annotations

from side_ours import *  # noqa: F403 - the same adapter, but for how the store is opened
from side_ours import sdk

NAME = "ours_fsync"


def open_store(root: str):
    return sdk.Store(root, fsync_interval=0)

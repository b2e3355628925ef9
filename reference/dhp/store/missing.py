"""The `not_found` of a store location with no store at it (`create=False`): one message for
both backends, naming the location and the command that creates a store there."""

from __future__ import annotations

import shlex

from dhp.core.errors import NotFound


def no_store(location: str, why: str) -> NotFound:
    return NotFound(f"no DHP store at {location} ({why}): check the location, or create a "
                    f"store there with `dhp init --store {shlex.quote(location)}`")

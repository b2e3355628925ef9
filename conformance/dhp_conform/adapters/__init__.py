"""Conformance adapters the kit ships for third-party implementations.

Each adapter is a standalone script: it runs inside the implementation's own environment, where
`dhp_conform` is not installed, so it needs only the standard library and that implementation.
`script(name)` gives its path, for building the `--impl` command:

    dhp-conform --impl "$ORIG_PYTHON $(python -c 'import dhp_conform.adapters as a; \
print(a.script("dhp_protocol_13"))')"
"""

from __future__ import annotations

from pathlib import Path

ADAPTERS = {"dhp_protocol_13": "dhp-protocol 1.3.0 (the original third-party DHP package)"}


def script(name: str) -> Path:
    """The path of the adapter script `name` (a key of ADAPTERS)."""
    if name not in ADAPTERS:
        raise KeyError(f"no adapter {name!r}; the kit ships {sorted(ADAPTERS)}")
    return Path(__file__).with_name(f"{name}.py")

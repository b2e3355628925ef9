"""The suites: each module exposes CHECKS, a list of `base.Check`. The mcp suite runs only in
the MCP profile (`dhp-conform --profile mcp`)."""

from . import (
    adapter,
    chaos,
    concurrency,
    fencing,
    lifecycle,
    limits,
    mcp,
    reach,
    schedule,
    supervisor,
    transport,
    vectors,
)

SUITES = {"adapter": adapter, "vectors": vectors, "lifecycle": lifecycle, "limits": limits,
          "fencing": fencing,
          "concurrency": concurrency, "supervisor": supervisor, "chaos": chaos,
          "schedule": schedule, "transport": transport, "reach": reach, "mcp": mcp}

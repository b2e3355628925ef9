"""The suites: each module exposes CHECKS, a list of `base.Check`."""

from . import (
    adapter,
    chaos,
    concurrency,
    fencing,
    lifecycle,
    schedule,
    supervisor,
    transport,
    vectors,
)

SUITES = {"adapter": adapter, "vectors": vectors, "lifecycle": lifecycle, "fencing": fencing,
          "concurrency": concurrency, "supervisor": supervisor, "chaos": chaos,
          "schedule": schedule, "transport": transport}

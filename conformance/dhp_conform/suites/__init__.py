"""The suites: each module exposes CHECKS, a list of `base.Check`."""

from . import (
    adapter,
    chaos,
    concurrency,
    fencing,
    lifecycle,
    limits,
    supervisor,
    transport,
    vectors,
)

SUITES = {"adapter": adapter, "vectors": vectors, "lifecycle": lifecycle, "limits": limits,
          "fencing": fencing,
          "concurrency": concurrency, "supervisor": supervisor, "chaos": chaos,
          "transport": transport}

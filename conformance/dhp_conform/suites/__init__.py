"""The suites: each module exposes CHECKS, a list of `base.Check`."""

from . import chaos, concurrency, fencing, lifecycle, vectors

SUITES = {"vectors": vectors, "lifecycle": lifecycle, "fencing": fencing,
          "concurrency": concurrency, "chaos": chaos}

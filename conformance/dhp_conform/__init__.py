"""dhp-conform: the DHP conformance kit.

A black-box tester: it drives an implementation through the adapter protocol
(spec/adapter.md), records a history of every request, response and fault, and checks the
protocol's invariants over that history. It never imports `dhp`; its oracles (canonical JSON,
schemas, the checkpoint chain) are its own, so a bug in the reference cannot hide itself.
"""

__version__ = "0.1.0"
ADAPTER_PROTOCOL = "1"

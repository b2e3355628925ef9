"""The protocol's rules: canonical JSON, identity, envelopes, the state machine, the
hash chain, the operations every store runs, schemas and the portable log. No I/O but
schema loading; no CLI."""

"""Shipping checkpoints to a peer: the file transport, the TCP server and the shipper."""

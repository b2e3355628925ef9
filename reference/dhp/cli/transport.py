"""`dhp-transport`: run a TCP transport server (spec: transport) in front of a store.

    dhp-transport --root ./peer --secret-file /etc/dhp/transport.secret [--create] \\
        [--bind 127.0.0.1] [--port 7461] [--tls-cert cert.pem --tls-key key.pem
        [--tls-client-ca ca.pem]] [--max-frame BYTES]
    dhp-transport --generate-secret /etc/dhp/transport.secret   (32 random bytes, mode 600)

Logs one line per connection and per rejection on stderr (DHP-TRN-003). SIGTERM or SIGINT
stops it; acknowledged frames are already durable, so stopping loses nothing.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import ssl
import sys
import threading

from dhp.cli.commands import STORE_HELP, add_create, open_store
from dhp.core.errors import DHPError
from dhp.core.exit_codes import EXIT_MEANINGS, epilog, exit_code
from dhp.transport.server import (
    DEFAULT_MAX_FRAME,
    DEFAULT_PORT,
    TransportServer,
    generate_secret,
    load_secret,
    server_ssl_context,
)

EPILOG = epilog(
    ["dhp-transport --generate-secret transport.secret",
     "dhp-transport --root ./peer --secret-file transport.secret --port 7461 --create",
     "dhp-transport --root ./peer --secret-file transport.secret --bind 0.0.0.0 \\\n"
     "      --tls-cert server.pem --tls-key server.key --tls-client-ca clients-ca.pem"],
    {**EXIT_MEANINGS,
     0: "stopped by SIGTERM or SIGINT (every acknowledged frame is durable)",
     2: "usage error or bad setup (port outside 0..65535, missing or unreadable secret or\n"
        "     TLS file, address in use, malformed store URL); the message names the option\n"
        "     and the file"})


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        port = -1
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a TCP port: give 0..65535 "
                                         "(0 picks a free one)")
    return port


def _readable(option: str, path: str | None) -> None:
    """Refuse a missing or unreadable file, naming the option and the file."""
    if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        why = "no such file" if not os.path.exists(path) else "not a readable file"
        raise OSError(f"{option} {path}: {why}")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dhp-transport",
                                description="Receive shipped handoffs into a DHP store.",
                                epilog=EPILOG,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--generate-secret", metavar="FILE",
                   help="write a new shared secret (32 random bytes as hex, mode 600) to FILE "
                        "and exit; copy FILE to the shipper's host")
    p.add_argument("--root", metavar="PATH", help=STORE_HELP.split(" (default")[0]
                   + "; it must exist unless --create")
    add_create(p)
    p.add_argument("--bind", default="127.0.0.1",
                   help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    p.add_argument("--port", type=_port, default=DEFAULT_PORT,
                   help=f"TCP port (default {DEFAULT_PORT}; 0 picks a free one)")
    p.add_argument("--secret-file",
                   help="file holding the shared secret (at least 32 bytes; see "
                        "--generate-secret)")
    p.add_argument("--tls-cert", help="PEM certificate chain: serve TLS only")
    p.add_argument("--tls-key", help="PEM private key (if not in --tls-cert)")
    p.add_argument("--tls-client-ca", help="require client certificates signed by this CA")
    p.add_argument("--max-frame", type=int, default=DEFAULT_MAX_FRAME,
                   help=f"largest frame accepted, in bytes (default {DEFAULT_MAX_FRAME})")
    p.add_argument("-q", "--quiet", action="store_true", help="log rejections only")
    return p


def _write_secret(path: str) -> int:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except OSError as exc:
        print(f"dhp-transport: cannot create {path}: {exc} (an existing secret is never "
              "overwritten)", file=sys.stderr)
        return 2
    with os.fdopen(fd, "w") as f:
        f.write(generate_secret() + "\n")
    print(f"wrote a new shared secret to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if args.generate_secret:
        return _write_secret(args.generate_secret)
    if not args.root or not args.secret_file:
        parser.error("--root and --secret-file are required")
    logging.basicConfig(level=logging.WARNING if args.quiet else logging.INFO, stream=sys.stderr,
                        format="%(asctime)s dhp-transport %(levelname)s %(message)s")
    if args.tls_client_ca and not args.tls_cert:
        print("dhp-transport: --tls-client-ca needs --tls-cert", file=sys.stderr)
        return 2
    try:
        for option in ("secret_file", "tls_cert", "tls_key", "tls_client_ca"):
            _readable("--" + option.replace("_", "-"), getattr(args, option))
        secret = load_secret(args.secret_file)
        try:
            context = (server_ssl_context(args.tls_cert, args.tls_key,
                                          client_cafile=args.tls_client_ca)
                       if args.tls_cert else None)
        except ssl.SSLError as exc:
            files = ", ".join(f for f in (args.tls_cert, args.tls_key, args.tls_client_ca)
                              if f)
            raise OSError(f"TLS files {files} cannot be used: {exc}") from None
        store = open_store(args.root, create=args.create, parents=args.parents)
    except (OSError, DHPError) as exc:
        print(f"dhp-transport: {exc}", file=sys.stderr)
        return exit_code(exc) if isinstance(exc, DHPError) else 2
    try:
        server = TransportServer(store, args.bind, args.port, secret=secret,
                                 ssl_context=context, max_frame=args.max_frame).bind()
    except (OSError, DHPError) as exc:
        store.close()
        print(f"dhp-transport: {exc}", file=sys.stderr)
        return exit_code(exc) if isinstance(exc, DHPError) else 2
    # The port line goes to stdout too, so a supervisor (or a test) can read a port-0 choice.
    print(f"listening on {args.bind}:{server.port}", flush=True)
    stop = threading.Event()

    def _stop(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    server.start()
    while not stop.wait(0.5):
        pass
    server.stop()
    store.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

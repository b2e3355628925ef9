"""A process that ships a chain into a shared folder with the file transport, to be killed
in the middle of an append (test_transport_file.py).

  file_writer.py FOLDER TAG COUNT PAD

Ships the envelope of `envelope(TAG)` and the first COUNT records of its chain (each state
padded by PAD bytes), printing "shipped SEQ" (flushed) after each append returned.
"""

from __future__ import annotations

import sys

from dhp.transport.file import FileShipper

from transport_helpers import envelope, records


def main() -> None:
    folder, tag, count, pad = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    env = envelope(tag)
    shipper = FileShipper(folder)
    for record in records(env, count, pad=pad):
        shipper.ship_checkpoint(env, record)
        print(f"shipped {record['seq']}", flush=True)


if __name__ == "__main__":
    main()

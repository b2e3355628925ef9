"""The helper process of dhp.core.results: validates one `{"schema", "result"}` request per
line on stdin and answers each with the JSON list of violations; the parent kills it when a
validation overruns its budget (DHP-LIM-008)."""

from __future__ import annotations

import json
import sys

from dhp.core.results import errors_in_process


def main() -> None:
    out = sys.stdout.buffer
    out.write(b"ready\n")
    out.flush()
    for line in sys.stdin.buffer:
        request = json.loads(line)
        errors = errors_in_process(request["schema"], request["result"])
        out.write(json.dumps(errors).encode("utf-8") + b"\n")
        out.flush()


if __name__ == "__main__":
    main()

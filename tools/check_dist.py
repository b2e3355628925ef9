"""Check built distributions (CI, .ci/run): the sdist and the wheel of durable-handoff in
DIST each hold the LICENSE file, and the wheel holds the schemas and vectors as package data.

    python tools/check_dist.py DIST
"""

from __future__ import annotations

import sys
import tarfile
import zipfile
from pathlib import Path


def problems(dist: Path) -> list[str]:
    wheels, sdists = sorted(dist.glob("*.whl")), sorted(dist.glob("*.tar.gz"))
    if len(wheels) != 1 or len(sdists) != 1:
        return [f"{dist}: expected one wheel and one sdist, found {wheels + sdists}"]
    found = []
    names = zipfile.ZipFile(wheels[0]).namelist()
    if not any(n.endswith(".dist-info/licenses/LICENSE") for n in names):
        found.append(f"{wheels[0].name}: no LICENSE in .dist-info/licenses/")
    for data in ("dhp_data/schemas/intent.json", "dhp_data/requirements.json"):
        if data not in names:
            found.append(f"{wheels[0].name}: no {data}")
    with tarfile.open(sdists[0]) as sdist:
        if not any(n.count("/") == 1 and n.endswith("/LICENSE") for n in sdist.getnames()):
            found.append(f"{sdists[0].name}: no LICENSE at its top")
    return found


if __name__ == "__main__":
    found = problems(Path(sys.argv[1]))
    for line in found:
        print(f"check_dist: {line}", file=sys.stderr)
    sys.exit(1 if found else 0)

"""The reference adapter behind a proxy that claims less: it forwards every line both ways
and removes from hello each named feature (and those it prefixes, `transport` also removes
`transport-tls`) and each named class. For tests of how the kit treats what is not claimed:

    python tests/helpers/claims_less.py manual-clock liveness
"""

import json
import subprocess
import sys

drop = sys.argv[1:]
child = subprocess.Popen([sys.executable, "-m", "dhp.adapter"], stdin=sys.stdin,
                         stdout=subprocess.PIPE, text=True)
for line in child.stdout:
    message = json.loads(line)
    data = message.get("data")
    if isinstance(data, dict) and "features" in data:
        data["features"] = [f for f in data["features"]
                            if not any(f == d or f.startswith(d + "-") for d in drop)]
        data["classes"] = [c for c in data["classes"] if c not in drop]
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()

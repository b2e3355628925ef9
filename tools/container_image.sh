#!/usr/bin/env bash
# Build the DHP container images with podman, from nothing but Debian's and Python's package
# registries (no container registry):
#   localhost/dhp-base:bookworm  a minimal Debian 12 root made with debootstrap (made once, kept)
#   localhost/dhp:latest         every DHP command, installed from a wheel built in this run
#   localhost/dhp-postgres:15    PostgreSQL 15 from Debian's packages, for the compose stack
# Idempotent: a second run reuses the base image and podman's layer cache (only a changed
# wheel is installed again). Needs root (debootstrap), podman, runc and debootstrap
#   apt-get install -y podman runc debootstrap
# and a Python with the `build` package (pip install build). docs/guide/containers.md.
#
#   tools/container_image.sh [--rebuild-base] [--no-postgres]
# Environment: PYTHON (python3), DHP_IMAGE (localhost/dhp:latest), DEBIAN_MIRROR
# (http://deb.debian.org/debian), CONTAINERS_CONF (deploy/containers.conf), PIP_CERT (the CA
# bundle pip trusts in the build; default the host's).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
base=localhost/dhp-base:bookworm
image=${DHP_IMAGE:-localhost/dhp:latest}
pg_image=localhost/dhp-postgres:15
python=${PYTHON:-python3}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
rebuild_base=0 postgres=1
for arg in "$@"; do
  case $arg in
    --rebuild-base) rebuild_base=1 ;;
    --no-postgres) postgres=0 ;;
    -h|--help) sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "container_image.sh: unknown option $arg (see --help)" >&2; exit 2 ;;
  esac
done
die() { echo "container_image.sh: error: $*" >&2; exit 1; }
say() { echo "[$(date +%H:%M:%S)] $*" >&2; }

command -v podman >/dev/null || die "podman is not installed (apt-get install -y podman runc)"
command -v runc >/dev/null || die "runc is not installed (apt-get install -y runc)"
export CONTAINERS_CONF=${CONTAINERS_CONF:-$root/deploy/containers.conf}

# 1. The base: debootstrap's minbase with Python and tini, imported as an image.
if [ "$rebuild_base" = 1 ] || ! podman image exists "$base"; then
  command -v debootstrap >/dev/null \
    || die "debootstrap is not installed (apt-get install -y debootstrap); it makes the base image"
  [ "$(id -u)" = 0 ] || die "debootstrap needs root to make the base image"
  rootfs=$(mktemp -d /var/tmp/dhp-base.XXXXXX)
  trap 'rm -rf "$rootfs"' EXIT
  say "making $base with debootstrap from $mirror (a few minutes)"
  debootstrap --variant=minbase --include=python3,python3-venv,tini,ca-certificates \
    bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
    || { tail -20 "$rootfs.log" >&2; die "debootstrap failed (log: $rootfs.log)"; }
  rm -f "$rootfs.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" -c --numeric-owner . \
    | podman import --change 'CMD ["/bin/bash"]' - "$base" >/dev/null
  rm -rf "$rootfs"; trap - EXIT
else
  say "reusing $base"
fi

# 2. The wheel and the build context.
"$python" -c 'import build' 2>/dev/null \
  || die "$python has no 'build' package (pip install build), or set PYTHON"
ctx=$root/deploy/.build
rm -rf "$ctx"; mkdir -p "$ctx"
say "building the wheel"
"$python" -m build -q --wheel -o "$ctx" "$root" >/dev/null
wheel=$(ls "$ctx"/*.whl)
# The wheel's dependencies with all its extras, pinned to nothing more than the wheel says:
# their own layer, reused while they do not change.
"$python" - "$wheel" >"$ctx/requirements.txt" <<'PY'
import sys, zipfile
from packaging.requirements import Requirement
extras = ("postgres", "mcp", "a2a", "otel")
with zipfile.ZipFile(sys.argv[1]) as z:
    meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
    lines = z.read(meta).decode().splitlines()
for line in lines:
    if line.startswith("Requires-Dist:"):
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras):
            req.marker = None
            print(req)
PY
cp "$root/deploy/Containerfile" "$root/deploy/tasks.py" "$root/deploy/dhp-when-ready" "$ctx/"
version=$(basename "$wheel" | cut -d- -f2)

# 3. The images. --network host: pip and apt reach the package registries as the host does.
# The host's CA bundle goes in as a build secret (not stored): pip trusts what the host trusts.
ca=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
secret=(); [ -s "$ca" ] && secret=(--secret "id=ca,src=$ca")
say "building $image (durable-handoff $version)"
podman build -q --network host --format docker --build-arg BASE="$base" "${secret[@]}" \
  -t "$image" -t "localhost/dhp:$version" "$ctx" >/dev/null
if [ "$postgres" = 1 ]; then
  say "building $pg_image"
  podman build -q --network host --format docker --build-arg BASE="$base" \
    -t "$pg_image" "$root/deploy/postgres" >/dev/null
fi
say "done: $(podman image inspect --format '{{.Size}}' "$image" | awk '{printf "%s %.0f MB", "'"$image"'", $1/1e6}')"

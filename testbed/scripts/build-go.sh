#!/usr/bin/env bash
# Builds the test bed's upstream Go components from their modules through the
# module proxy, into a version-keyed cache outside the checkout. Re-running with
# the binaries already present is a no-op.
#
# Why a wrapper module: k8s.io/kubernetes and etcd's server module carry
# `replace` lines, so `go install pkg@version` refuses them. Inside a wrapper
# module those replace lines are ignored and we add our own, derived from the
# downloaded go.mod rather than typed out.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

LPP_VERSION="${LPP_VERSION:-v0.0.30}"
COREDNS_VERSION="${COREDNS_VERSION:-v1.12.4}"
# MinIO tags no semver releases; pin the pseudo-version the proxy serves.
MINIO_VERSION="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"
# The Prometheus Operator's CRDs, so the chart's ServiceMonitor and PrometheusRule are checked
# against their real schemas by the bed's API server. Nothing is built: the module's source
# carries the CRD YAML.
PROMETHEUS_OPERATOR_VERSION="${PROMETHEUS_OPERATOR_VERSION:-v0.94.0}"

export GOMODCACHE="$LIFEBOAT_CACHE/go/mod"
export GOCACHE="$LIFEBOAT_CACHE/go/build"
export GOFLAGS="-mod=mod"
export GOTOOLCHAIN=local
export CGO_ENABLED=0

BIN="$LIFEBOAT_CACHE/bin"
mkdir -p "$BIN" "$GOMODCACHE" "$GOCACHE"

log() { printf '[build-go %s] %s\n' "$(date +%H:%M:%S)" "$*"; }

stamp_ok() { [ -x "$BIN/$1" ] && [ -f "$BIN/$1.version" ] && [ "$(cat "$BIN/$1.version")" = "$2" ]; }

build_kubernetes() {
  local want=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
  local missing=()
  for b in "${want[@]}"; do stamp_ok "$b" "$K8S_VERSION" || missing+=("$b"); done
  if [ ${#missing[@]} -eq 0 ]; then log "kubernetes $K8S_VERSION: cached"; return; fi
  local w="$LIFEBOAT_CACHE/src/kubernetes-$K8S_VERSION"
  mkdir -p "$w"
  cd "$w"
  local staging="v0${K8S_VERSION#v1}"
  if [ ! -f go.mod ] || ! grep -q "k8s.io/kubernetes $K8S_VERSION" go.mod; then
    log "kubernetes $K8S_VERSION: preparing wrapper module (staging $staging)"
    rm -f go.mod go.sum
    go mod init lifeboat.local/k8s-wrapper >/dev/null 2>&1
    go mod download -json "k8s.io/kubernetes@$K8S_VERSION" >/dev/null
    local modfile="$GOMODCACHE/cache/download/k8s.io/kubernetes/@v/$K8S_VERSION.mod"
    {
      echo "require k8s.io/kubernetes $K8S_VERSION"
      grep -E '^\s*k8s\.io/[a-z0-9.-]+ => \./staging/' "$modfile" |
        awk -v v="$staging" '{print "replace " $1 " => " $1 " " v}'
    } >> go.mod
    cat > tools.go <<'GO'
//go:build tools

package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-proxy"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
	_ "k8s.io/kubernetes/cmd/kubelet"
)
GO
    GOFLAGS=-mod=mod go mod tidy -e >/dev/null 2>tidy.log || { cat tidy.log; exit 1; }
  fi
  local commit date pkg ld
  date="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  ld=""
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$K8S_VERSION" | cut -d. -f2)"
    ld="$ld -X $pkg.gitTreeState=clean -X $pkg.buildDate=$date"
  done
  for b in "${missing[@]}"; do
    log "kubernetes $K8S_VERSION: building $b"
    go build -trimpath -tags selinux,notest -ldflags "-s -w $ld" -o "$BIN/$b.tmp" "k8s.io/kubernetes/cmd/$b"
    mv "$BIN/$b.tmp" "$BIN/$b"
    echo "$K8S_VERSION" > "$BIN/$b.version"
  done
}

build_simple() { # name version module-path package-path
  local name=$1 version=$2 module=$3 pkg=$4 ldflags=${5:-}
  if stamp_ok "$name" "$version"; then log "$name $version: cached"; return; fi
  local w="$LIFEBOAT_CACHE/src/$name-$version"
  mkdir -p "$w"; cd "$w"
  if [ ! -f go.mod ]; then
    go mod init "lifeboat.local/$name-wrapper" >/dev/null 2>&1
    echo "require $module $version" >> go.mod
    printf '//go:build tools\n\npackage tools\n\nimport _ "%s"\n' "$pkg" > tools.go
    go mod tidy -e >/dev/null 2>tidy.log || { cat tidy.log; exit 1; }
  fi
  log "$name $version: building"
  go build -trimpath -ldflags "-s -w $ldflags" -o "$BIN/$name.tmp" "$pkg"
  mv "$BIN/$name.tmp" "$BIN/$name"
  echo "$version" > "$BIN/$name.version"
}

# What the test bed runs, MinIO included (the bed's S3 store and the mover's tests).
build_testbed() {
  build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3
  build_kubernetes
  build_simple local-path-provisioner "$LPP_VERSION" github.com/rancher/local-path-provisioner github.com/rancher/local-path-provisioner
  build_simple coredns "$COREDNS_VERSION" github.com/coredns/coredns github.com/coredns/coredns
  build_simple minio "$MINIO_VERSION" github.com/minio/minio github.com/minio/minio
}

# Copies the ServiceMonitor and PrometheusRule CRDs of the Prometheus Operator's module into
# $LIFEBOAT_CACHE/crds/prometheus-operator-<version>/.
fetch_monitoring_crds() {
  local out="$LIFEBOAT_CACHE/crds/prometheus-operator-$PROMETHEUS_OPERATOR_VERSION"
  if [ -s "$out/monitoring.coreos.com_servicemonitors.yaml" ] && [ -s "$out/monitoring.coreos.com_prometheusrules.yaml" ]; then
    log "prometheus-operator CRDs $PROMETHEUS_OPERATOR_VERSION: cached"; return
  fi
  log "prometheus-operator CRDs $PROMETHEUS_OPERATOR_VERSION: downloading the module"
  local dir
  dir="$(cd /tmp && go mod download -json "github.com/prometheus-operator/prometheus-operator@$PROMETHEUS_OPERATOR_VERSION" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
  [ -n "$dir" ] || { echo "go mod download gave no directory for prometheus-operator $PROMETHEUS_OPERATOR_VERSION" >&2; exit 1; }
  mkdir -p "$out.tmp"
  cp "$dir/example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml" \
     "$dir/example/prometheus-operator-crd/monitoring.coreos.com_prometheusrules.yaml" "$out.tmp/"
  rm -rf "$out" && mv "$out.tmp" "$out"
}

what="${1:-all}"
# One build at a time: the mover's tests run in parallel and each builds MinIO when it is
# missing, and two builds in one wrapper module break each other (`go mod init` fails on the
# go.mod the other just wrote). The second waits, then finds the binary cached.
exec 9>"$LIFEBOAT_CACHE/build-go.lock"
if ! flock -n 9; then
  log "$what: waiting for another build-go.sh to finish"
  flock 9
fi
case "$what" in
  kubernetes) build_kubernetes ;;
  etcd) build_simple etcd "$ETCD_VERSION" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/server/v3 ;;
  local-path-provisioner) build_simple local-path-provisioner "$LPP_VERSION" github.com/rancher/local-path-provisioner github.com/rancher/local-path-provisioner ;;
  coredns) build_simple coredns "$COREDNS_VERSION" github.com/coredns/coredns github.com/coredns/coredns ;;
  minio) build_simple minio "$MINIO_VERSION" github.com/minio/minio github.com/minio/minio ;;
  testbed) build_testbed ;;
  monitoring-crds) fetch_monitoring_crds ;;
  all) build_testbed ;;
  *) echo "usage: $0 [all|testbed|kubernetes|etcd|local-path-provisioner|coredns|minio|monitoring-crds]" >&2; exit 2 ;;
esac

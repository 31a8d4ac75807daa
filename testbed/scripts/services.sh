#!/usr/bin/env bash
# Starts one component of the bed as a background process (there is no
# systemd to rely on): its configuration is written under the state dir, its
# output goes to $LIFEBOAT_STATE/logs/NAME.log and its pid to
# $LIFEBOAT_RUN/pids/NAME.pid. Starting a component that already runs is a
# no-op. Readiness is awaited by the caller (cargo xtask testbed up).
#
#   services.sh start NAME    NAME: containerd etcd kube-apiserver
#                             kube-controller-manager kube-scheduler kubelet
#                             kube-proxy coredns local-path-provisioner minio
#   services.sh running NAME  exit 0 when NAME runs
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

CONF="$LIFEBOAT_STATE/config"

running() {
  local pidfile="$PIDS/$1.pid" pid state cmd
  [ -f "$pidfile" ] || return 1
  pid="$(cat "$pidfile")"
  [ -r "/proc/$pid/stat" ] || return 1
  state="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
  case "$state" in Z|X|"") return 1 ;; esac
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null || true)"
  # A process in the middle of exec shows an empty command line for a moment.
  [ -z "$cmd" ] && return 0
  # Compare the command too, so a recycled pid is not taken for ours.
  case "$cmd" in *"$1"*) return 0 ;; esac
  return 1
}

launch() { # name binary args...
  local name=$1; shift
  if running "$name"; then log "$name: already running (pid $(cat "$PIDS/$name.pid"))"; return; fi
  log "$name: starting, log $LOGS/$name.log"
  # setsid: the component outlives the shell that started it and is not hit
  # by a Ctrl-C meant for cargo.
  setsid "$@" >>"$LOGS/$name.log" 2>&1 < /dev/null &
  echo $! > "$PIDS/$name.pid"
}

start_containerd() {
  mkdir -p "$LIFEBOAT_STATE/containerd" "$LIFEBOAT_RUN/containerd"
  cat > "$CONF/containerd.toml" <<TOML
# containerd 1.6 (Debian bookworm) configuration for the bed. Its own root,
# state and socket keep it apart from any other containerd on the machine.
version = 2
root = "$LIFEBOAT_STATE/containerd"
state = "$LIFEBOAT_RUN/containerd/state"
# Keeps /opt/containerd out of the picture.
disabled_plugins = ["io.containerd.internal.v1.opt"]

[grpc]
  address = "$CONTAINERD_SOCK"

[plugins."io.containerd.grpc.v1.cri"]
  # Built locally (images/pause); there is no registry to pull from.
  sandbox_image = "$IMG_PAUSE"
  # kubelet asks for negative oom_score_adj values (-998 for pod sandboxes),
  # which needs CAP_SYS_RESOURCE; sandboxed VMs may withhold it even from
  # root, and then runc fails with "can't get final child's PID from pipe".
  # Clamping to containerd's own score costs nothing on a test bed.
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "${CONTAINERD_SNAPSHOTTER:-overlayfs}"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        # kubelet runs with cgroupDriver cgroupfs; the two must agree.
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "$LIFEBOAT_STATE/cni/net.d"
TOML
  launch containerd containerd --config "$CONF/containerd.toml"
}

start_etcd() {
  # Plain HTTP on loopback only: nothing but the local apiserver talks to it.
  # Fsync is skipped because the bed's data is thrown away on `down`, and a
  # VM disk makes every fsync slow.
  launch etcd "$BIN/etcd" \
    --name lifeboat \
    --data-dir "$LIFEBOAT_STATE/etcd" \
    --listen-client-urls http://127.0.0.1:2379 \
    --advertise-client-urls http://127.0.0.1:2379 \
    --listen-peer-urls http://127.0.0.1:2380 \
    --initial-advertise-peer-urls http://127.0.0.1:2380 \
    --initial-cluster lifeboat=http://127.0.0.1:2380 \
    --listen-metrics-urls http://127.0.0.1:2381 \
    --unsafe-no-fsync \
    --log-level warn
}

start_kube_apiserver() {
  # Every request of the operator's service accounts is audited (metadata only: no bodies, so
  # no secret value), so that `cargo xtask ci` can check the ClusterRole against what the
  # operator really did (xtask/src/rbac.rs). Nothing else is logged.
  cat > "$CONF/audit-policy.yaml" <<YAML
apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
  - level: Metadata
    userGroups: ["system:serviceaccounts:lifeboat-system"]
  - level: None
YAML
  launch kube-apiserver "$BIN/kube-apiserver" \
    --advertise-address "$NODE_IP" \
    --bind-address "$NODE_IP" \
    --secure-port 6443 \
    --etcd-servers http://127.0.0.1:2379 \
    --service-cluster-ip-range "$SERVICE_CIDR" \
    --allow-privileged=true \
    --authorization-mode Node,RBAC \
    --enable-admission-plugins NodeRestriction,OwnerReferencesPermissionEnforcement \
    --audit-policy-file "$CONF/audit-policy.yaml" \
    --audit-log-path "$LOGS/audit.log" \
    --audit-log-format json \
    --audit-log-maxsize 8192 \
    --audit-log-maxbackup 1 \
    --client-ca-file "$PKI/ca.crt" \
    --tls-cert-file "$PKI/apiserver.crt" \
    --tls-private-key-file "$PKI/apiserver.key" \
    --kubelet-client-certificate "$PKI/apiserver-kubelet-client.crt" \
    --kubelet-client-key "$PKI/apiserver-kubelet-client.key" \
    --kubelet-certificate-authority "$PKI/ca.crt" \
    --kubelet-preferred-address-types InternalIP \
    --service-account-issuer "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --service-account-key-file "$PKI/sa.pub" \
    --service-account-signing-key-file "$PKI/sa.key" \
    --api-audiences "https://kubernetes.default.svc.$CLUSTER_DOMAIN" \
    --v 1
}

start_kube_controller_manager() {
  launch kube-controller-manager "$BIN/kube-controller-manager" \
    --kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
    --authentication-kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
    --authorization-kubeconfig "$PKI/kube-controller-manager.kubeconfig" \
    --bind-address 127.0.0.1 \
    --leader-elect=false \
    --use-service-account-credentials=true \
    --service-account-private-key-file "$PKI/sa.key" \
    --root-ca-file "$PKI/ca.crt" \
    --cluster-signing-cert-file "$PKI/ca.crt" \
    --cluster-signing-key-file "$PKI/ca.key" \
    --v 1
}

start_kube_scheduler() {
  launch kube-scheduler "$BIN/kube-scheduler" \
    --kubeconfig "$PKI/kube-scheduler.kubeconfig" \
    --authentication-kubeconfig "$PKI/kube-scheduler.kubeconfig" \
    --authorization-kubeconfig "$PKI/kube-scheduler.kubeconfig" \
    --bind-address 127.0.0.1 \
    --leader-elect=false \
    --v 1
}

start_kubelet() {
  mkdir -p "$LIFEBOAT_STATE/kubelet"
  cat > "$CONF/kubelet.yaml" <<YAML
apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: $NODE_IP
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: $PKI/ca.crt}
authorization: {mode: Webhook}
tlsCertFile: $PKI/kubelet-serving.crt
tlsPrivateKeyFile: $PKI/kubelet-serving.key
readOnlyPort: 0
containerRuntimeEndpoint: unix://$CONTAINERD_SOCK
# containerd 1.6 is configured for cgroupfs (SystemdCgroup = false), and
# there is no systemd to delegate to anyway.
cgroupDriver: cgroupfs
failSwapOn: false
clusterDNS: [$CLUSTER_DNS]
clusterDomain: $CLUSTER_DOMAIN
# Pods get only cluster DNS: nothing outside the machine can be resolved or
# reached, so the host's resolvers are not handed to them.
resolvConf: ""
# The locally built images (the pause image above all) cannot be pulled back
# once collected, so image garbage collection never runs.
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
# A shared development disk is often fuller than eviction defaults allow; the
# bed would evict its own pods long before the disk were really full.
evictionHard:
  memory.available: 100Mi
  nodefs.available: 1%
  nodefs.inodesFree: 1%
  imagefs.available: 1%
evictionPressureTransitionPeriod: 10s
serializeImagePulls: false
YAML
  launch kubelet "$BIN/kubelet" \
    --config "$CONF/kubelet.yaml" \
    --kubeconfig "$PKI/kubelet.kubeconfig" \
    --root-dir "$LIFEBOAT_STATE/kubelet" \
    --hostname-override "$NODE_NAME" \
    --node-ip "$NODE_IP" \
    --v 1
}

start_kube_proxy() {
  cat > "$CONF/kube-proxy.yaml" <<YAML
apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
mode: iptables
bindAddress: $NODE_IP
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
hostnameOverride: $NODE_NAME
clusterCIDR: $POD_CIDR
clientConnection:
  kubeconfig: $PKI/kube-proxy.kubeconfig
# NodePorts only on the node address, never on the machine's real interfaces.
nodePortAddresses: ["$NODE_IP/32"]
# Leave the machine's conntrack sysctls alone (zero = do not set): a VM may
# refuse them, and the bed needs no tuning.
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
YAML
  launch kube-proxy "$BIN/kube-proxy" --config "$CONF/kube-proxy.yaml" --v 1
}

start_coredns() {
  cat > "$CONF/Corefile" <<COREFILE
# Cluster names only. Nothing outside the machine is reachable, so other
# names get an immediate NXDOMAIN rather than a forward that times out.
$CLUSTER_DOMAIN:53 in-addr.arpa:53 ip6.arpa:53 {
    bind $CLUSTER_DNS
    errors
    ready 127.0.0.1:8181
    kubernetes $CLUSTER_DOMAIN in-addr.arpa ip6.arpa {
        kubeconfig $PKI/addons.kubeconfig
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
    }
    cache 5
}
.:53 {
    bind $CLUSTER_DNS
    errors
    template ANY ANY {
        rcode NXDOMAIN
    }
}
COREFILE
  launch coredns "$BIN/coredns" -conf "$CONF/Corefile"
}

start_local_path_provisioner() {
  mkdir -p "$LIFEBOAT_STATE/local-path"
  cat > "$CONF/local-path-config.json" <<JSON
{"nodePathMap": [{"node": "DEFAULT_PATH_FOR_NON_LISTED_NODES", "paths": ["$LIFEBOAT_STATE/local-path"]}]}
JSON
  # The helper pod creates and removes volume directories; it needs only a
  # shell, mkdir and rm, which the bed's Debian base image has.
  cat > "$CONF/local-path-helper-pod.yaml" <<YAML
apiVersion: v1
kind: Pod
metadata:
  name: helper-pod
spec:
  priorityClassName: system-node-critical
  tolerations:
  - key: node.kubernetes.io/disk-pressure
    operator: Exists
    effect: NoSchedule
  containers:
  - name: helper-pod
    image: $IMG_DEBIAN
    imagePullPolicy: Never
YAML
  launch local-path-provisioner "$BIN/local-path-provisioner" start \
    --kubeconfig "$PKI/addons.kubeconfig" \
    --config "$CONF/local-path-config.json" \
    --helper-pod-file "$CONF/local-path-helper-pod.yaml" \
    --helper-image "$IMG_DEBIAN" \
    --namespace local-path-storage \
    --configmap-name local-path-config \
    --service-account-name local-path-provisioner-service-account
}

start_minio() {
  mkdir -p "$LIFEBOAT_STATE/minio/data"
  if [ ! -s "$MINIO_CREDENTIALS" ]; then
    umask 077
    # Both random: the e2e tiers search every status, event and log for each of them, and a
    # word such as "lifeboat" would be found in every object name.
    printf 'MINIO_ROOT_USER=lb%s\nMINIO_ROOT_PASSWORD=%s\n' \
      "$(head -c 8 /dev/urandom | od -An -tx1 | tr -d ' \n')" \
      "$(head -c 24 /dev/urandom | od -An -tx1 | tr -d ' \n')" > "$MINIO_CREDENTIALS"
  fi
  # A top-level directory of a single-drive MinIO is a bucket.
  mkdir -p "$LIFEBOAT_STATE/minio/data/$MINIO_BUCKET"
  local user password
  user="$(sed -n 's/^MINIO_ROOT_USER=//p' "$MINIO_CREDENTIALS")"
  password="$(sed -n 's/^MINIO_ROOT_PASSWORD=//p' "$MINIO_CREDENTIALS")"
  MINIO_ROOT_USER="$user" MINIO_ROOT_PASSWORD="$password" MINIO_BROWSER=off \
    launch minio "$BIN/minio" server --quiet --address "$MINIO_ADDR" \
      "$LIFEBOAT_STATE/minio/data"
}

case "${1:-}" in
  start)
    name="${2:?component name}"
    fn="start_${name//-/_}"
    declare -F "$fn" >/dev/null || die "unknown component $name"
    mkdir -p "$LOGS" "$PIDS" "$CONF"
    "$fn"
    ;;
  running) running "${2:?component name}" ;;
  *) echo "usage: $0 start NAME | running NAME" >&2; exit 2 ;;
esac

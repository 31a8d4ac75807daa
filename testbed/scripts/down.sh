#!/usr/bin/env bash
# Stops the bed and removes everything it put on the machine: processes
# (components, containerd shims and the containers under them), mounts,
# network namespaces, interfaces, routes, iptables rules and cgroups. The
# state dir is deleted except its logs, which stay for post-mortems. Safe to
# run on a bed that is half up or already down.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

CTR=(ctr --address "$CONTAINERD_SOCK" -n k8s.io)

alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

stop_pid() { # pid label
  local pid=$1 label=$2 i
  alive "$pid" || return 0
  kill -TERM "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  log "$label (pid $pid) ignored SIGTERM for 5s; killing"
  kill -KILL "$pid" 2>/dev/null || true
  for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
  log "WARNING: $label (pid $pid) is still alive"
}

# Stops a group of components at once (they shut down in parallel, which
# saves most of the time `down` takes), then kills whatever ignored SIGTERM.
stop_components() {
  local c f pids=() names=() i
  for c in "$@"; do
    f="$PIDS/$c.pid"
    [ -f "$f" ] || continue
    if "$here/services.sh" running "$c"; then
      log "stopping $c"
      pids+=("$(cat "$f")"); names+=("$c")
      kill -TERM "$(cat "$f")" 2>/dev/null || true
    fi
    rm -f "$f"
  done
  for i in "${!pids[@]}"; do stop_pid "${pids[$i]}" "${names[$i]}"; done
}

# kubelet first, so nothing restarts the containers being removed below.
stop_components kubelet
stop_components minio local-path-provisioner coredns kube-proxy kube-scheduler kube-controller-manager

netns=()
if [ -S "$CONTAINERD_SOCK" ] && "$here/services.sh" running containerd; then
  # Remember the pods' network namespaces before their sandboxes are gone.
  for id in $("${CTR[@]}" containers ls -q 2>/dev/null); do
    while read -r ns; do netns+=("$ns"); done < <("${CTR[@]}" containers info "$id" 2>/dev/null |
      grep -o '"/var/run/netns/[^"]*"' | tr -d '"' | sort -u)
  done
  tasks="$("${CTR[@]}" tasks ls -q 2>/dev/null || true)"
  if [ -n "$tasks" ]; then
    log "killing $(echo "$tasks" | wc -l) containers"
    for id in $tasks; do "${CTR[@]}" tasks kill -a -s SIGKILL "$id" >/dev/null 2>&1 || true; done
    for id in $tasks; do "${CTR[@]}" tasks delete -f "$id" >/dev/null 2>&1 || true; done
  fi
fi
stop_components containerd

# A shim whose task could not be deleted outlives containerd; ours are the
# ones started with our containerd's socket.
for p in /proc/[0-9]*; do
  cmd="$(tr '\0' ' ' < "$p/cmdline" 2>/dev/null || true)"
  case "$cmd" in
    *containerd-shim*"-address $CONTAINERD_SOCK"*) stop_pid "${p#/proc/}" "containerd-shim" ;;
  esac
done

stop_components kube-apiserver
stop_components etcd

# Deepest first, so nested mounts (pod volumes inside kubelet's dir, rootfs
# inside containerd's state) come off before their parents.
unmount_under() {
  local prefix=$1 m
  for m in $(awk -v p="$prefix" '$5 == p || index($5, p "/") == 1 {print $5}' /proc/self/mountinfo | awk '{print length, $0}' | sort -rn | cut -d' ' -f2-); do
    umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || log "WARNING: could not unmount $m"
  done
}
for ns in "${netns[@]}"; do
  umount "$ns" 2>/dev/null || true
  rm -f "$ns"
done
unmount_under "$LIFEBOAT_STATE"
unmount_under "$LIFEBOAT_RUN"

# kube-proxy's own cleanup removes its KUBE-* chains in iptables and nftables.
if [ -x "$BIN/kube-proxy" ]; then
  "$BIN/kube-proxy" --cleanup >/dev/null 2>&1 || log "WARNING: kube-proxy --cleanup failed"
fi
# What remains is kubelet's canary and hint chains: unhook, flush, delete.
remove_kube_chains() { # iptables|ip6tables
  local ipt=$1 table rule chain
  command -v "$ipt" >/dev/null || return 0
  for table in filter nat mangle; do
    { "$ipt" -t "$table" -S 2>/dev/null || true; } | { grep -E '^-A .* -j KUBE-' || true; } | sed 's/^-A /-D /' |
      while read -r rule; do eval "$ipt -t $table $rule" 2>/dev/null || true; done
    for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -t "$table" -F "$chain" 2>/dev/null || true
    done
    for chain in $("$ipt" -t "$table" -S 2>/dev/null | awk '$1 == "-N" && $2 ~ /^KUBE-/ {print $2}'); do
      "$ipt" -t "$table" -X "$chain" 2>/dev/null || true
    done
  done
}
remove_kube_chains iptables
remove_kube_chains ip6tables

"$here/node-net.sh" down

# Empty pod cgroups left behind by kubelet in every v1 hierarchy (and v2).
for h in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
  [ -d "$h/kubepods" ] && find "$h/kubepods" -depth -type d -exec rmdir {} \; 2>/dev/null || true
done

# Everything but the logs goes; the next `up` starts from a fresh cluster.
if [ -d "$LIFEBOAT_STATE" ]; then
  find "$LIFEBOAT_STATE" -mindepth 1 -maxdepth 1 ! -name logs -exec rm -rf {} +
fi
rm -rf "$LIFEBOAT_RUN"
log "down"

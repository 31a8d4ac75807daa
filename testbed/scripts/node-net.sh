#!/usr/bin/env bash
# Host networking for the bed.
#   node-net.sh up    dummy interface, sysctls, routes, guard rules, CNI config
#   node-net.sh down  undo all of it (CNI bridge included)
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

CNI_CONF_DIR="$LIFEBOAT_STATE/cni/net.d"
GUARD=LIFEBOAT-GUARD

up() {
  # No default route can be assumed, so the node address lives on a dummy
  # interface that is always up.
  # Kernels without the dummy driver (some VM kernels build neither it nor
  # modules) get a bridge without ports instead: it too holds an address and
  # silently drops what is routed to it.
  if ! ip link show "$NODE_IF" >/dev/null 2>&1; then
    ip link add "$NODE_IF" type dummy 2>/dev/null || ip link add "$NODE_IF" type bridge
  fi
  ip addr replace "$NODE_IP/24" dev "$NODE_IF"
  ip link set "$NODE_IF" up
  # Service IPs exist only as kube-proxy DNAT rules. Routing them to the dummy
  # interface keeps host-side connections valid until DNAT applies, and drops
  # rather than sends out of the machine anything kube-proxy has not rewritten.
  ip route replace "$SERVICE_CIDR" dev "$NODE_IF"

  # Forwarding is needed for pod -> Service -> pod on the same bridge. Remember
  # the previous value so `down` restores it.
  mkdir -p "$LIFEBOAT_RUN"
  [ -f "$LIFEBOAT_RUN/ip_forward.orig" ] || cat /proc/sys/net/ipv4/ip_forward > "$LIFEBOAT_RUN/ip_forward.orig"
  sysctl -qw net.ipv4.ip_forward=1
  # br_netfilter is built into the kernels this runs on (no modprobe needed);
  # without these, bridged pod traffic skips kube-proxy's rules.
  if [ -e /proc/sys/net/bridge/bridge-nf-call-iptables ]; then
    sysctl -qw net.bridge.bridge-nf-call-iptables=1 net.bridge.bridge-nf-call-ip6tables=1
  else
    die "br_netfilter is missing (/proc/sys/net/bridge absent); pods could not reach Services"
  fi

  # Pods may talk to each other and to the node, never beyond the machine:
  # forwarding is on only for the bed's own traffic.
  iptables -N "$GUARD" 2>/dev/null || iptables -F "$GUARD"
  iptables -A "$GUARD" -s "$POD_CIDR" -d "$POD_CIDR" -j RETURN
  iptables -A "$GUARD" -s "$POD_CIDR" -d "$NODE_CIDR" -j RETURN
  iptables -A "$GUARD" -s "$POD_CIDR" -j REJECT
  iptables -C FORWARD -j "$GUARD" 2>/dev/null || iptables -I FORWARD 1 -j "$GUARD"

  # An own CNI directory, not /etc/cni/net.d, so other runtimes on the machine
  # are not affected. containerd adds the loopback interface itself. No ipMasq
  # and no portmap: neither is needed inside the node, and both leave iptables
  # rules behind when a pod is not torn down through CNI.
  mkdir -p "$CNI_CONF_DIR"
  cat > "$CNI_CONF_DIR/10-lifeboat.conflist" <<JSON
{
  "cniVersion": "1.0.0",
  "name": "$CNI_NETWORK",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "$CNI_BRIDGE",
      "isGateway": true,
      "ipMasq": false,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "dataDir": "$LIFEBOAT_STATE/cni/ipam",
        "ranges": [[{"subnet": "$POD_CIDR"}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    }
  ]
}
JSON
}

down() {
  iptables -D FORWARD -j "$GUARD" 2>/dev/null || true
  iptables -F "$GUARD" 2>/dev/null || true
  iptables -X "$GUARD" 2>/dev/null || true
  ip link del "$CNI_BRIDGE" 2>/dev/null || true
  ip link del "$NODE_IF" 2>/dev/null || true
  if [ -f "$LIFEBOAT_RUN/ip_forward.orig" ]; then
    sysctl -qw net.ipv4.ip_forward="$(cat "$LIFEBOAT_RUN/ip_forward.orig")"
    rm -f "$LIFEBOAT_RUN/ip_forward.orig"
  fi
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac

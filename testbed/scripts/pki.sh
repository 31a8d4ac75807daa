#!/usr/bin/env bash
# Creates the bed's certificates and kubeconfigs with openssl, modelled on
# kubernetes/hack/local-up-cluster.sh. Existing files are kept, so a restart
# after a crash does not invalidate tokens and kubeconfigs already handed out.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
# shellcheck source=common.sh
. "$here/common.sh"

mkdir -p "$PKI"
cd "$PKI"
umask 077

if [ ! -f ca.crt ]; then
  log "creating the cluster CA"
  openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -sha256 \
    -keyout ca.key -out ca.crt -subj "/CN=lifeboat-testbed-ca" 2>/dev/null
fi

# Signed service-account tokens need their own key pair.
if [ ! -f sa.key ]; then
  openssl genrsa -out sa.key 2048 2>/dev/null
  openssl rsa -in sa.key -pubout -out sa.pub 2>/dev/null
fi

cert() { # name subject ext(clientAuth|serverAuth) [subjectAltName]
  local name=$1 subj=$2 usage=$3 san=${4:-}
  [ -f "$name.crt" ] && return
  openssl req -newkey rsa:2048 -nodes -keyout "$name.key" -out "$name.csr" -subj "$subj" 2>/dev/null
  {
    echo "basicConstraints=CA:FALSE"
    echo "keyUsage=critical,digitalSignature,keyEncipherment"
    echo "extendedKeyUsage=$usage"
    [ -n "$san" ] && echo "subjectAltName=$san"
  } > "$name.ext"
  openssl x509 -req -in "$name.csr" -CA ca.crt -CAkey ca.key -CAcreateserial -days 3650 -sha256 \
    -extfile "$name.ext" -out "$name.crt" 2>/dev/null
  rm -f "$name.csr" "$name.ext"
}

cert apiserver "/CN=kube-apiserver" serverAuth \
  "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.$CLUSTER_DOMAIN,DNS:localhost,IP:127.0.0.1,IP:$KUBERNETES_SVC_IP,IP:$NODE_IP"
cert kubelet-serving "/CN=system:node:$NODE_NAME/O=system:nodes" serverAuth "DNS:$NODE_NAME,IP:$NODE_IP"
cert admin "/CN=lifeboat-admin/O=system:masters" clientAuth
cert kube-controller-manager "/CN=system:kube-controller-manager" clientAuth
cert kube-scheduler "/CN=system:kube-scheduler" clientAuth
cert kubelet "/CN=system:node:$NODE_NAME/O=system:nodes" clientAuth
cert kube-proxy "/CN=system:kube-proxy" clientAuth
# kubelet authorizes exec, logs and port-forward for this identity only after
# system:kubelet-api-admin is bound to it (testbed/manifests/rbac.yaml).
cert apiserver-kubelet-client "/CN=kube-apiserver-kubelet-client" clientAuth
# CoreDNS and local-path-provisioner run on the host as cluster add-ons; a
# system:masters identity saves maintaining their RBAC on a throwaway cluster.
cert addons "/CN=lifeboat-testbed-addons/O=system:masters" clientAuth

kubeconfig() { # file cert-name user
  local file=$1 name=$2 user=$3
  cat > "$file" <<KC
apiVersion: v1
kind: Config
clusters:
- name: lifeboat-testbed
  cluster:
    certificate-authority: $PKI/ca.crt
    server: https://$NODE_IP:6443
users:
- name: $user
  user:
    client-certificate: $PKI/$name.crt
    client-key: $PKI/$name.key
contexts:
- name: lifeboat-testbed
  context:
    cluster: lifeboat-testbed
    user: $user
current-context: lifeboat-testbed
KC
}

kubeconfig admin.kubeconfig admin lifeboat-admin
kubeconfig kube-controller-manager.kubeconfig kube-controller-manager system:kube-controller-manager
kubeconfig kube-scheduler.kubeconfig kube-scheduler system:kube-scheduler
kubeconfig kubelet.kubeconfig kubelet "system:node:$NODE_NAME"
kubeconfig kube-proxy.kubeconfig kube-proxy system:kube-proxy
kubeconfig addons.kubeconfig addons lifeboat-testbed-addons
# The kubeconfig and CA are not secret; the keys stay readable by root only.
chmod 0644 admin.kubeconfig ca.crt
chmod 0755 "$PKI"

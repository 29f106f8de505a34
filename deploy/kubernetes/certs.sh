#!/bin/sh
# Issue the cell's certificates with `troupe certs` and store them as the
# Secrets the manifests mount, each with ca.crt, tls.crt and tls.key:
#
#   troupe-store-0-tls .. troupe-store-2-tls   store/1 .. store/3, naming
#                                              every DNS name the node is
#                                              dialled at
#   troupe-scheduler-tls                       scheduler/troupe-scheduler
#   troupe-controller-tls                      controller/troupe-controller
#   troupe-agent-tls                           agent/AGENT_NAME, a prefix
#                                              pattern such as 'worker-*'
#
# and an admin certificate for the CLI, left in CA_DIR (no Secret).
#
#   certs.sh CA_DIR AGENT_NAME
#
# CA_DIR holds the CA (made there on the first run; its key never leaves
# it: keep it off the cluster). Running it again renews every certificate:
# the Secrets are updated in place and the processes pick the new files up
# on their next connection, without a restart. The Secrets go to
# `kubectl apply`, or, with OUT=DIR, to DIR/<name>.yaml (for a GitOps
# pipeline that encrypts them, say).
#
# Environment: TROUPE (the troupe binary, default: troupe), KUBECTL
# (default: kubectl), NAMESPACE (default: troupe; the manifests name it in
# their DNS names too), CLUSTER_DOMAIN (default: cluster.local), STORES
# (default: 3), ADMIN (the admin certificate's name, default: your user),
# VALIDITY (the certificates', as `troupe certs issue --validity`, e.g.
# 720h; default: troupe's, a year).
set -eu

usage() {
	echo "usage: $0 CA_DIR AGENT_NAME   (AGENT_NAME: the nodes' common name prefix and '*', e.g. 'worker-*')" >&2
	exit 2
}
[ $# -eq 2 ] || usage
ca_dir=$1
agent_name=$2
case $agent_name in
'*') echo "$0: AGENT_NAME '*' would speak for every machine of the cell; give the nodes' common prefix, e.g. 'worker-*'" >&2; exit 2 ;;
*'*') ;;
*) echo "$0: AGENT_NAME must end in '*' (one certificate for every node of the pool)" >&2; exit 2 ;;
esac

troupe=${TROUPE:-troupe}
kubectl=${KUBECTL:-kubectl}
ns=${NAMESPACE:-troupe}
domain=${CLUSTER_DOMAIN:-cluster.local}
stores=${STORES:-3}
admin=${ADMIN:-$(id -un)}
validity=${VALIDITY:+--validity=$VALIDITY}

if [ ! -f "$ca_dir/ca.crt" ]; then
	"$troupe" certs init --dir "$ca_dir" --cell "$ns"
fi

# emit NAME FILE: the Secret NAME with ca.crt, and FILE.crt and FILE.key
# (from CA_DIR) as tls.crt and tls.key.
emit() {
	b64() { base64 <"$1" | tr -d '\n'; }
	doc=$(cat <<DOC
apiVersion: v1
kind: Secret
metadata:
  name: $1
  namespace: $ns
  labels:
    app.kubernetes.io/name: troupe
type: Opaque
data:
  ca.crt: $(b64 "$ca_dir/ca.crt")
  tls.crt: $(b64 "$ca_dir/$2.crt")
  tls.key: $(b64 "$ca_dir/$2.key")
DOC
)
	if [ -n "${OUT:-}" ]; then
		mkdir -p "$OUT"
		(umask 077 && printf '%s\n' "$doc" >"$OUT/$1.yaml")
	else
		printf '%s\n' "$doc" | "$kubectl" apply -f -
	fi
}

i=0
while [ "$i" -lt "$stores" ]; do
	pod=store-$i
	# Its own name, the Services' (headless and public), and localhost for
	# kubectl port-forward.
	hosts=$pod.troupe-store.$ns.svc,$pod.troupe-store.$ns.svc.$domain,$pod.troupe-store.$ns,$pod.troupe-store
	for svc in troupe-store troupe-store-public; do
		hosts=$hosts,$svc.$ns.svc,$svc.$ns.svc.$domain,$svc.$ns,$svc
	done
	hosts=$hosts,localhost,127.0.0.1
	"$troupe" certs issue $validity --dir "$ca_dir" --role store --name $((i + 1)) --hosts "$hosts" --out "k8s-$pod"
	emit "troupe-$pod-tls" "k8s-$pod"
	i=$((i + 1))
done
"$troupe" certs issue $validity --dir "$ca_dir" --role scheduler --name troupe-scheduler --out k8s-scheduler
emit troupe-scheduler-tls k8s-scheduler
"$troupe" certs issue $validity --dir "$ca_dir" --role controller --name troupe-controller --out k8s-controller
emit troupe-controller-tls k8s-controller
"$troupe" certs issue $validity --dir "$ca_dir" --role agent --name "$agent_name" --out k8s-agent
emit troupe-agent-tls k8s-agent
"$troupe" certs issue $validity --dir "$ca_dir" --role admin --name "$admin" --out k8s-admin
echo "the CLI: TROUPE_CA=$ca_dir/ca.crt TROUPE_CERT=$ca_dir/k8s-admin.crt TROUPE_KEY=$ca_dir/k8s-admin.key"

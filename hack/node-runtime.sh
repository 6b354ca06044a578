#!/usr/bin/env bash
# The real-node tier's runtime (containerd, runc, the CNI plugins and the tools kube-proxy and
# the kubelet call), from Debian's packages, installed when missing. Only root can run a node, so
# as any other user this does nothing: the suites that need a node skip, saying why.
set -euo pipefail
[ "$(id -u)" = 0 ] || exit 0
missing=()
for b in containerd:containerd runc:runc ctr:containerd /usr/lib/cni/bridge:containernetworking-plugins conntrack:conntrack socat:socat iptables:iptables ip:iproute2; do
	bin=${b%%:*} pkg=${b#*:}
	if [ ! -x "$bin" ] && ! command -v "$bin" >/dev/null 2>&1 && [ ! -x "/usr/sbin/$bin" ] && [ ! -x "/sbin/$bin" ]; then missing+=("$pkg"); fi
done
[ ${#missing[@]} -gt 0 ] || exit 0
echo "installing the real node's runtime: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u) ||
	{ apt-get update && apt-get install -y --no-install-recommends $(printf '%s\n' "${missing[@]}" | sort -u); }

#!/usr/bin/env bash
# Builds the binaries of the local cluster from pinned Go modules (tools/testbin/*) into a cache
# outside the checkout, skipping those already there. Prints the cache directory on stdout.
#
#   hack/testbin.sh [binary...]     default: kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl etcd etcdctl etcdutl
#   hack/testbin.sh --velero        velero, velero-plugin-for-aws, velero-restore-helper and minio (the S3
#                                   test stack), local-path-provisioner (the real node's volumes)
#   hack/testbin.sh --peers         restic and kopia (peers of coffer-agent's BenchmarkPeers)
#   hack/testbin.sh --csi           csi-provisioner, csi-snapshotter and snapshot-controller (the real
#                                   node's CSI volumes and snapshots)
#   hack/testbin.sh --prometheus    promtool (checks and unit-tests the PrometheusRules of deploy/) and
#                                   prometheus (Kubernetes service discovery only: e2e/deployments)
#
# COFFER_TESTBIN_ROOT overrides the cache root (default $HOME/.cache/coffer/testbin).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.7.3
VELERO_VERSION=v1.18.3
VELERO_AWS_VERSION=v1.14.3
MINIO_VERSION=v0.0.0-20260212201848-7aac2a2c5b7c
RESTIC_VERSION=v0.18.1
KOPIA_VERSION=v0.22.3
PROMETHEUS_VERSION=v0.316.0 # the Go module of Prometheus 3.16.0
CSI_PROVISIONER_VERSION=v5.3.0
CSI_SNAPSHOTTER_VERSION=v8.7.0
cache="${COFFER_TESTBIN_ROOT:-$HOME/.cache/coffer/testbin}"
dir="$cache/k8s-${K8S_VERSION}_etcd-${ETCD_VERSION}"
if [ "${1:-}" = --velero ]; then
	shift
	dir="$cache/velero-${VELERO_VERSION}_aws-${VELERO_AWS_VERSION}_minio-${MINIO_VERSION##*-}"
	set -- velero velero-plugin-for-aws velero-restore-helper minio local-path-provisioner
elif [ "${1:-}" = --peers ]; then
	shift
	dir="$cache/peers-restic-${RESTIC_VERSION}_kopia-${KOPIA_VERSION}"
	set -- restic kopia
elif [ "${1:-}" = --csi ]; then
	shift
	dir="$cache/csi-provisioner-${CSI_PROVISIONER_VERSION}_snapshotter-${CSI_SNAPSHOTTER_VERSION}"
	set -- csi-provisioner csi-snapshotter snapshot-controller
elif [ "${1:-}" = --prometheus ]; then
	shift
	dir="$cache/prometheus-${PROMETHEUS_VERSION}"
	set -- promtool prometheus
fi
mkdir -p "$dir"

k8s_minor=${K8S_VERSION#v1.}; k8s_minor=${k8s_minor%%.*}
k8s_ldflags="-s -w -X k8s.io/component-base/version.gitVersion=${K8S_VERSION} -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=${k8s_minor} -X k8s.io/component-base/version.gitTreeState=clean"

prom_version="3.${PROMETHEUS_VERSION#v0.3}" # module v0.3MM.P is Prometheus 3.MM.P
prom_ldflags="-s -w -X github.com/prometheus/common/version.Version=${prom_version} -X github.com/prometheus/common/version.Branch=HEAD"

build() { # name module-dir package ldflags [build tags]
	local name=$1 mod=$2 pkg=$3 ldflags=$4 tags=${5:-}
	if [ -x "$dir/$name" ]; then return 0; fi
	echo "testbin: building $name (first build is slow; see README)" >&2
	local start=$SECONDS
	(cd "$root/tools/testbin/$mod" && GOWORK=off GOFLAGS=-mod=mod CGO_ENABLED=0 \
		go build -trimpath -tags="$tags" -ldflags="$ldflags" -o "$dir/.$name.tmp.$$" "$pkg")
	mv "$dir/.$name.tmp.$$" "$dir/$name"
	echo "testbin: built $name in $((SECONDS - start))s" >&2
}

bins=("$@")
[ ${#bins[@]} -gt 0 ] || bins=(etcd etcdctl etcdutl kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl)
for b in "${bins[@]}"; do
	case $b in
	etcd) build etcd etcd go.etcd.io/etcd/server/v3 "-s -w" ;;
	etcdctl) build etcdctl etcd go.etcd.io/etcd/etcdctl/v3 "-s -w" ;;
	etcdutl) build etcdutl etcd go.etcd.io/etcd/etcdutl/v3 "-s -w" ;;
	velero) build velero velero github.com/vmware-tanzu/velero/cmd/velero "-s -w" ;;
	velero-plugin-for-aws) build velero-plugin-for-aws velero github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws "-s -w" ;;
	velero-restore-helper) build velero-restore-helper velero github.com/vmware-tanzu/velero/cmd/velero-restore-helper "-s -w" ;;
	minio) build minio minio github.com/minio/minio "-s -w" ;;
	local-path-provisioner) build local-path-provisioner localpath github.com/rancher/local-path-provisioner "-s -w" ;;
	csi-provisioner) build csi-provisioner csiprovisioner github.com/kubernetes-csi/external-provisioner/v5/cmd/csi-provisioner "-s -w -X main.version=${CSI_PROVISIONER_VERSION}" ;;
	csi-snapshotter|snapshot-controller)
		build "$b" csi "github.com/kubernetes-csi/external-snapshotter/v8/cmd/$b" "-s -w -X main.version=${CSI_SNAPSHOTTER_VERSION}" ;;
	restic) build restic restic github.com/restic/restic/cmd/restic "-s -w" ;;
	kopia) build kopia kopia github.com/kopia/kopia "-s -w" ;;
	# Rules checks and tests need no service discovery: leaving out every SD plugin (and the cloud
	# SDKs they bring) keeps the cold build to about 3.5 min on 2 cores.
	promtool) build promtool prometheus github.com/prometheus/prometheus/cmd/promtool "$prom_ldflags" remove_all_sd ;;
	# The server, for e2e/deployments (a real Prometheus discovering the components): Kubernetes
	# service discovery only.
	prometheus) build prometheus prometheus github.com/prometheus/prometheus/cmd/prometheus "$prom_ldflags" "remove_all_sd enable_kubernetes_sd" ;;
	kube-apiserver|kube-controller-manager|kube-scheduler|kubelet|kubectl)
		build "$b" kubernetes "k8s.io/kubernetes/cmd/$b" "$k8s_ldflags" ;;
	*) echo "testbin: unknown binary $b" >&2; exit 2 ;;
	esac
done
echo "$dir"

package node

// ShimSocket is shimSocket for the tests: where containerd puts a container's shim socket.
func ShimSocket(address, id string) string { return shimSocket(address, k8sNamespace, id) }

// Package admission holds the table test of Coffer's admission rules (CRD CEL rules and the
// verifier's ValidatingAdmissionPolicy), run against a real kube-apiserver and etcd.
package admission

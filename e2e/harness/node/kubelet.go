package node

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"sigs.k8s.io/yaml"
)

// kubeletClientCerts writes a CA the kubelet trusts for client certificates, and a client
// certificate (group system:masters) the kube-apiserver presents to the kubelet for logs, exec
// and port-forward. Returns the CA, certificate and key paths.
func kubeletClientCerts(dir string) (caFile, certFile, keyFile string, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "coffer-node-kubelet-client-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return "", "", "", err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", "", "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "coffer-kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return "", "", "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return "", "", "", err
	}
	caFile, certFile, keyFile = filepath.Join(dir, "kubelet-client-ca.crt"), filepath.Join(dir, "apiserver-kubelet-client.crt"), filepath.Join(dir, "apiserver-kubelet-client.key")
	for _, f := range []struct {
		path, typ string
		der       []byte
	}{{caFile, "CERTIFICATE", caDER}, {certFile, "CERTIFICATE", der}, {keyFile, "EC PRIVATE KEY", keyDER}} {
		if err := os.WriteFile(f.path, pem.EncodeToMemory(&pem.Block{Type: f.typ, Bytes: f.der}), 0o600); err != nil {
			return "", "", "", err
		}
	}
	return caFile, certFile, keyFile, nil
}

// kubeletConfig is the node's KubeletConfiguration. Beyond the private paths and random ports:
//
//   - cgroupDriver cgroupfs and failCgroupV1 false: no systemd, cgroup v1 (hybrid).
//   - cgroupRoot /<node name>: the kubelet removes pod cgroups it does not know under its
//     root; a private root keeps it away from other kubelets' pods (the harness creates it).
//   - makeIPTablesUtilChains false: otherwise the kubelet installs host-wide KUBE-* chains and
//     a DROP rule.
//   - image GC off (high threshold 100) so imported images are never collected; eviction
//     thresholds near zero so a busy shared disk does not evict the pods under test.
//   - oomScoreAdj 0: the machine lacks CAP_SYS_RESOURCE, the default -999 cannot be applied.
//   - podLogsDir and volumePluginDir under the node's directory, not /var/log/pods and
//     /usr/libexec/kubernetes.
//   - x509 client auth with the harness's CA (the apiserver's kubelet client certificate),
//     anonymous auth off, webhook authorization.
func kubeletConfig(d *layoutDirs, ip string, port, healthzPort int, cgroupRoot, clientCA string) ([]byte, error) {
	cfg := map[string]any{
		"apiVersion":                  "kubelet.config.k8s.io/v1beta1",
		"kind":                        "KubeletConfiguration",
		"address":                     ip,
		"port":                        port,
		"readOnlyPort":                0,
		"healthzBindAddress":          "127.0.0.1",
		"healthzPort":                 healthzPort,
		"containerRuntimeEndpoint":    "unix://" + d.containerdSock,
		"imageServiceEndpoint":        "unix://" + d.containerdSock,
		"cgroupDriver":                "cgroupfs",
		"cgroupRoot":                  cgroupRoot,
		"cgroupsPerQOS":               true,
		"failCgroupV1":                false,
		"failSwapOn":                  false,
		"makeIPTablesUtilChains":      false,
		"oomScoreAdj":                 0,
		"imageGCHighThresholdPercent": 100,
		"imageGCLowThresholdPercent":  99,
		"imageMinimumGCAge":           "24h",
		"evictionHard": map[string]string{
			"memory.available":   "1Mi",
			"nodefs.available":   "1%",
			"nodefs.inodesFree":  "1%",
			"imagefs.available":  "1%",
			"imagefs.inodesFree": "1%",
		},
		"evictionPressureTransitionPeriod": "5s",
		"podLogsDir":                       d.podLogs,
		"volumePluginDir":                  d.volumePlugins,
		"resolvConf":                       "/etc/resolv.conf",
		"registerNode":                     true,
		"serializeImagePulls":              false,
		"shutdownGracePeriod":              "0s",
		"shutdownGracePeriodCriticalPods":  "0s",
		"rotateCertificates":               false,
		"serverTLSBootstrap":               false,
		"localStorageCapacityIsolation":    true,
		"nodeStatusUpdateFrequency":        "2s",
		"nodeStatusReportFrequency":        "10s",
		"syncFrequency":                    "10s",
		"fileCheckFrequency":               "20s",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": true, "cacheTTL": "10s"},
			"x509":      map[string]any{"clientCAFile": clientCA},
		},
		"authorization": map[string]any{
			"mode":    "Webhook",
			"webhook": map[string]any{"cacheAuthorizedTTL": "10s", "cacheUnauthorizedTTL": "5s"},
		},
	}
	return yaml.Marshal(cfg)
}

func kubeletArgs(d *layoutDirs, kubeconfig, name, ip string, extra []string) []string {
	args := []string{
		"--config=" + d.kubeletConfig,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + d.kubeletRoot,
		"--cert-dir=" + filepath.Join(d.kubeletRoot, "pki"),
		"--hostname-override=" + name,
		"--node-ip=" + ip,
		"--v=2",
	}
	return append(args, extra...)
}

func schedulerArgs(d *layoutDirs, kubeconfig string, port int) []string {
	return []string{
		"--kubeconfig=" + kubeconfig,
		"--authentication-kubeconfig=" + kubeconfig,
		"--authorization-kubeconfig=" + kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + d.scheduler,
		"--leader-elect=false",
		"--v=1",
	}
}

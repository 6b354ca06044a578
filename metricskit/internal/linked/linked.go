// Package linked serves metrics behind a filter and says when it is ready, for BenchmarkLinkedRSS:
// the two programs under it differ only in the filter they link.
package linked

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"os"
	"runtime"

	"github.com/go-logr/logr"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Serve builds provider's filter for an API server that is never asked, serves a handler behind
// it on a loopback port, prints "ready" and returns when its standard input closes.
func Serve(provider func(*rest.Config, *http.Client) (metricsserver.Filter, error)) error {
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return err
	}
	f, err := provider(cfg, hc)
	if err != nil {
		return err
	}
	h, err := f(logr.Discard(), http.NotFoundHandler())
	if err != nil {
		return err
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	go func() { _ = http.Serve(l, h) }()
	runtime.GC()
	fmt.Println("ready")
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return nil
}

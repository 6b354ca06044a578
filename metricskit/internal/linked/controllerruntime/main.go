// Command controllerruntime serves metrics behind controller-runtime's filter (BenchmarkLinkedRSS).
package main

import (
	"log"

	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/coffer-backup/coffer/metricskit/internal/linked"
)

func main() {
	if err := linked.Serve(filters.WithAuthenticationAndAuthorization); err != nil {
		log.Fatal(err)
	}
}

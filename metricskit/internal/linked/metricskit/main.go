// Command metricskit serves metrics behind metricskit's filter (BenchmarkLinkedRSS).
package main

import (
	"log"

	"github.com/coffer-backup/coffer/metricskit"
	"github.com/coffer-backup/coffer/metricskit/internal/linked"
)

func main() {
	if err := linked.Serve(metricskit.Reviewing); err != nil {
		log.Fatal(err)
	}
}

//go:build tools

// Package tools pins github.com/prometheus/prometheus (its prometheus server and promtool) for the
// local cluster: promtool runs the chart's alert rule tests (test/chart), the server scrapes the
// local cluster. Module tags v0.3xx.y are Prometheus v3.xx.y (v0.316.0 = v3.16.0).
package tools

import (
	_ "github.com/prometheus/prometheus/cmd/prometheus"
	_ "github.com/prometheus/prometheus/cmd/promtool"
)

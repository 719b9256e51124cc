package webhook

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// Admission results, the "result" label of hami_go_webhook_admissions_total.
const (
	resultAllowed = "allowed" // admitted without a patch
	resultPatched = "patched" // admitted with a patch
	resultDenied  = "denied"  // refused (bad input, C25, C27 nodeName, internal error)
)

// Metrics are the webhook's own series (controller-runtime adds its request counts and
// latencies, controller_runtime_webhook_*).
type Metrics struct {
	// Admissions counts reviews by resource ("pods", "rayclusters") and result.
	Admissions *prometheus.CounterVec
}

// NewMetrics creates the series and registers them with reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Admissions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: metrics.Namespace,
			Subsystem: "webhook",
			Name:      "admissions_total",
			Help:      "Admission reviews handled, by resource (pods, rayclusters) and result (allowed, patched, denied).",
		}, []string{"resource", "result"}),
	}
	if reg != nil {
		reg.MustRegister(m.Admissions)
	}
	return m
}

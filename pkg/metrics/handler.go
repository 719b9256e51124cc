package metrics

import (
	"fmt"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/klog/v2"
)

// Handler serves the metrics g gathers (Prometheus text or protobuf, as promhttp negotiates) so
// that one bad series never costs the whole scrape (case C35): on a gathering error (two series
// with one label set, a collector that fails) it serves every series it could gather with
// status 200 (promhttp.ContinueOnError; 500 only when nothing was gathered), logs the error and
// counts it in promhttp_metric_handler_errors_total{cause="gathering"|"encoding"}, registered on
// reg (nil: not counted). Used by the extender, the device plugin and the webhook.
func Handler(g prometheus.Gatherer, reg prometheus.Registerer) http.Handler {
	return promhttp.HandlerFor(g, promhttp.HandlerOpts{
		ErrorLog:      errorLog{},
		ErrorHandling: promhttp.ContinueOnError,
		Registry:      reg,
	})
}

// errorLog sends promhttp's error lines to klog.
type errorLog struct{}

// Println implements promhttp.Logger.
func (errorLog) Println(v ...any) {
	klog.ErrorS(fmt.Errorf("%s", fmt.Sprintln(v...)), "Serving metrics: series left out of the scrape")
}

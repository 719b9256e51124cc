package metrics

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"k8s.io/klog/v2"
)

// Collectors is a prometheus.Registerer that keeps the collectors registered on it and is itself
// one prometheus.Collector of them all: a component's metrics served by another process's
// registry, such as the HamiGo scheduler plugin's (pkg/schedplugin) by kube-scheduler's
// /metrics (k8s.io/component-base legacyregistry), whose handler fails the whole scrape on one
// bad series. Collect keeps case C35's rule there, as Handler does for hami-go's own endpoints:
// a series collected twice in one scrape (same family, same label values; the first is kept) or
// one that fails to encode is left out and logged, and the drop is counted in
// promhttp_metric_handler_errors_total{cause="gathering"} (a counter Collectors serves itself).
// Describe sends the descriptors of every collector registered, so registering Collectors on a
// registry that already holds the same series fails there (prometheus.AlreadyRegisteredError)
// instead of serving them twice. Safe for concurrent use.
type Collectors struct {
	mu      sync.Mutex
	cs      []prometheus.Collector
	dropped prometheus.Counter
}

// NewCollectors returns an empty Collectors.
func NewCollectors() *Collectors {
	return &Collectors{dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"}).WithLabelValues("gathering")}
}

var _ interface {
	prometheus.Registerer
	prometheus.Collector
} = (*Collectors)(nil)

// Register adds c; it fails (prometheus.AlreadyRegisteredError) when c describes a descriptor
// equal to one already registered.
func (r *Collectors) Register(c prometheus.Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	have := map[string]bool{}
	for _, d := range describe(r.cs...) {
		have[d.String()] = true
	}
	for _, d := range describe(c) {
		if have[d.String()] {
			return prometheus.AlreadyRegisteredError{ExistingCollector: c, NewCollector: c}
		}
	}
	r.cs = append(r.cs, c)
	return nil
}

// MustRegister registers cs and panics on the first error (prometheus.Registerer's contract).
func (r *Collectors) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := r.Register(c); err != nil {
			panic(err)
		}
	}
}

// Unregister removes c; false when c was not registered.
func (r *Collectors) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i, have := range r.cs {
		if have == c {
			r.cs = append(r.cs[:i], r.cs[i+1:]...)
			return true
		}
	}
	return false
}

// Describe sends the descriptors of the registered collectors and of the drop counter.
func (r *Collectors) Describe(ch chan<- *prometheus.Desc) {
	r.mu.Lock()
	cs := append([]prometheus.Collector(nil), r.cs...)
	r.mu.Unlock()
	for _, d := range describe(append(cs, r.dropped)...) {
		ch <- d
	}
}

// Collect sends the registered collectors' series, each once, and the drop counter.
func (r *Collectors) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	cs := append([]prometheus.Collector(nil), r.cs...)
	r.mu.Unlock()
	in := make(chan prometheus.Metric)
	go func() {
		for _, c := range cs {
			c.Collect(in)
		}
		close(in)
	}()
	seen := map[string]bool{}
	var errs []error
	for m := range in {
		key, err := seriesKey(m)
		if err == nil && seen[key] {
			err = fmt.Errorf("series %s collected twice", key)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		seen[key] = true
		ch <- m
	}
	if len(errs) > 0 {
		r.dropped.Add(float64(len(errs)))
		klog.ErrorS(errors.Join(errs...), "Serving metrics: series left out of the scrape", "dropped", len(errs))
	}
	r.dropped.Collect(ch)
}

// seriesKey is m's family descriptor and label pairs (sorted by name); an error when m does not
// encode.
func seriesKey(m prometheus.Metric) (string, error) {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return "", fmt.Errorf("series of %s: %w", m.Desc(), err)
	}
	pairs := make([]string, 0, len(d.GetLabel()))
	for _, l := range d.GetLabel() {
		pairs = append(pairs, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	sort.Strings(pairs)
	return m.Desc().String() + "{" + strings.Join(pairs, ",") + "}", nil
}

// describe returns the descriptors cs describe.
func describe(cs ...prometheus.Collector) []*prometheus.Desc {
	ch := make(chan *prometheus.Desc)
	go func() {
		for _, c := range cs {
			c.Describe(ch)
		}
		close(ch)
	}()
	var out []*prometheus.Desc
	for d := range ch {
		out = append(out, d)
	}
	return out
}

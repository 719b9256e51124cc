package metrics

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
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
// promhttp_metric_handler_errors_total{cause="gathering"} (a counter Collectors serves itself,
// so no two Collectors can be registered on one registry: the second is refused there instead
// of serving every series twice).
//
// Registration checks are client_golang's own (a prometheus.Registry inside keeps the
// descriptors): a collector whose descriptors clash with one registered is refused with its
// error. Register every collector before Collectors itself is registered elsewhere: the outer
// registry learns the descriptors then, and a series of one added later would fail its scrape.
// Safe for concurrent use.
type Collectors struct {
	mu      sync.Mutex
	reg     *prometheus.Registry // the registration checks and their errors
	cs      []prometheus.Collector
	dropped prometheus.Counter
}

// NewCollectors returns an empty Collectors.
func NewCollectors() *Collectors {
	return &Collectors{reg: prometheus.NewRegistry(), dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "promhttp_metric_handler_errors_total",
		Help: "Total number of internal errors encountered by the promhttp metric handler.",
	}, []string{"cause"}).WithLabelValues("gathering")}
}

var _ interface {
	prometheus.Registerer
	prometheus.Collector
} = (*Collectors)(nil)

// Register adds c, or returns prometheus.Registry's error for it (prometheus.AlreadyRegisteredError
// naming the collector registered before, or the clash of descriptors).
func (r *Collectors) Register(c prometheus.Collector) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.reg.Register(c); err != nil {
		return err
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

// Unregister removes the collector that describes what c describes (as prometheus.Registry
// matches it); false when there is none.
func (r *Collectors) Unregister(c prometheus.Collector) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.reg.Unregister(c) {
		return false
	}
	want := descKey(c)
	r.cs = slices.DeleteFunc(r.cs, func(have prometheus.Collector) bool { return descKey(have) == want })
	return true
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

// collectBuffer is the channel between the registered collectors and the check of their series,
// so that a collector holding a lock while it sends (the extender's, its cache's) is not held up
// by the check.
const collectBuffer = 1024

// Collect sends the registered collectors' series, each once, and the drop counter.
func (r *Collectors) Collect(ch chan<- prometheus.Metric) {
	r.mu.Lock()
	cs := append([]prometheus.Collector(nil), r.cs...)
	r.mu.Unlock()
	in := make(chan prometheus.Metric, collectBuffer)
	go func() {
		for _, c := range cs {
			c.Collect(in)
		}
		close(in)
	}()
	seen := map[string]bool{}
	descs := map[*prometheus.Desc]string{}
	var errs []error
	for m := range in {
		key, err := seriesKey(m, descs)
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

// seriesKey is m's family descriptor (its string kept in descs, one per descriptor) and label
// pairs (sorted by name); an error when m does not encode.
func seriesKey(m prometheus.Metric, descs map[*prometheus.Desc]string) (string, error) {
	var d dto.Metric
	if err := m.Write(&d); err != nil {
		return "", fmt.Errorf("series of %s: %w", m.Desc(), err)
	}
	desc, ok := descs[m.Desc()]
	if !ok {
		desc = m.Desc().String()
		descs[m.Desc()] = desc
	}
	pairs := make([]string, 0, len(d.GetLabel()))
	for _, l := range d.GetLabel() {
		pairs = append(pairs, l.GetName()+"="+strconv.Quote(l.GetValue()))
	}
	sort.Strings(pairs)
	return desc + "{" + strings.Join(pairs, ",") + "}", nil
}

// descKey is the descriptors c describes, sorted and joined: what identifies a collector.
func descKey(c prometheus.Collector) string {
	var ds []string
	for _, d := range describe(c) {
		ds = append(ds, d.String())
	}
	sort.Strings(ds)
	return strings.Join(ds, "\n")
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

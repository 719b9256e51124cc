package extender

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"
	extenderv1 "k8s.io/kube-scheduler/extender/v1"

	"github.com/hami-go/hami-go/pkg/device"
	hmetrics "github.com/hami-go/hami-go/pkg/metrics"
)

// maxBody bounds a request body (a filter call with 5,000 node names and a pod is well under 1 MiB).
const maxBody = 64 << 20

// ErrNotReady is what the verbs answer until Run has rebuilt the cache from the API (Ready false:
// the extender started or restarted and its informers have not synced, or ctx ended). kube-scheduler
// calls the verbs over loopback with no handshake as soon as it leads, so an empty cache would book
// GPUs that are in use. Until ready, POST /filter fails every node with this reason in FailedNodes
// (an answer, not an HTTP error: kube-scheduler treats an extender's HTTP error as a scheduling
// error and clears the pod's nomination), /prioritize scores no node, /bind refuses with it, and
// /preempt keeps no victims (an empty NodeNameToMetaVictims: kube-scheduler evicts nobody). The
// verbs refuse the same way, with their own reasons, from SIGTERM on (ErrStopping), and with
// Config.LeaderLease while its kube-scheduler does not lead or has just taken over (ErrNotLeading,
// ErrHandOver: leader.go).
var ErrNotReady = errors.New("hami-go scheduler extender not ready: its cache of nodes, pods and leases is not yet rebuilt from the API (it started or restarted); the pod is retried")

// Handler returns the extender's HTTP API and its health and metrics on one mux: APIHandler's
// routes and MetricsHandler's. The binary serves it on --address when --metrics-address is empty.
func (e *Extender) Handler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	e.registerAPI(mux)
	e.registerHealth(mux, gatherer)
	return mux
}

// APIHandler returns the routes only kube-scheduler may call: POST /filter, /prioritize (hosts
// scored 0 left out, see scoredOnly), /bind, /preempt (JSON of k8s.io/kube-scheduler/extender/v1).
// Until Ready the verbs refuse (ErrNotReady). Malformed JSON is answered 400 with the reason; a panic in a handler is recovered and answered
// 500 with its message. Serve it on a loopback address (--address 127.0.0.1:8888): anything that
// reaches it can bind pods.
func (e *Extender) APIHandler() http.Handler {
	mux := http.NewServeMux()
	e.registerAPI(mux)
	return mux
}

// MetricsHandler returns GET /healthz (200 while the process serves), /readyz (200 only once the
// cache was rebuilt, 503 before) and /metrics (gatherer's metrics in Prometheus' text format;
// absent when gatherer is nil; a bad series is left out, not the scrape: pkg/metrics Handler,
// case C35), and nothing else: a listener Prometheus and probes can reach
// (--metrics-address) without reaching /filter or /bind.
func (e *Extender) MetricsHandler(gatherer prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	e.registerHealth(mux, gatherer)
	return mux
}

// registerAPI adds the scheduler verbs to mux (see APIHandler).
func (e *Extender) registerAPI(mux *http.ServeMux) {
	mux.HandleFunc("POST /filter", e.verb("filter", e.serveFilter))
	mux.HandleFunc("POST /prioritize", e.verb("prioritize", e.servePrioritize))
	mux.HandleFunc("POST /bind", e.verb("bind", e.serveBind))
	mux.HandleFunc("POST /preempt", e.verb("preempt", e.servePreempt))
}

// serveFilter handles POST /filter: ExtenderArgs (the pod required; node names from NodeNames,
// or from Nodes without nodeCacheCapable) answered with Scheduler.Filter's result, or with
// refusedFilter while the verbs refuse (a pod refused for a hand-over or for not leading is
// requeued once it is over). It returns the outcome for the verb's metrics: "ok", "refused"
// (also when no node fits) or "bad_request".
func (e *Extender) serveFilter(w http.ResponseWriter, r *http.Request) string {
	var args extenderv1.ExtenderArgs
	if !decode(w, r, &args) {
		return "bad_request"
	}
	if args.Pod == nil {
		http.Error(w, "ExtenderArgs.Pod is missing", http.StatusBadRequest)
		return "bad_request"
	}
	var names []string
	switch {
	case args.NodeNames != nil:
		names = *args.NodeNames
	case args.Nodes != nil:
		for i := range args.Nodes.Items {
			names = append(names, args.Nodes.Items[i].Name)
		}
	}
	if why := e.FilterRefusal(args.Pod); why != nil {
		reply(w, refusedFilter(names, why))
		return "refused"
	}
	res := e.sched.Filter(args.Pod, names)
	reply(w, res)
	if len(*res.NodeNames) == 0 {
		return "refused"
	}
	return "ok"
}

// servePrioritize handles POST /prioritize: ExtenderArgs (the pod and NodeNames required:
// nodeCacheCapable) answered with the hosts Scheduler.PrioritizeInto scored above 0 (scoredOnly),
// or an empty list while the verbs refuse. The list is pooled (scorePool) across calls. It
// returns the outcome for the verb's metrics: "ok", "refused" or "bad_request".
func (e *Extender) servePrioritize(w http.ResponseWriter, r *http.Request) string {
	var args extenderv1.ExtenderArgs
	if !decode(w, r, &args) {
		return "bad_request"
	}
	if args.Pod == nil || args.NodeNames == nil {
		http.Error(w, "ExtenderArgs.Pod and ExtenderArgs.NodeNames are required (nodeCacheCapable: true)", http.StatusBadRequest)
		return "bad_request"
	}
	if e.refusal() != nil {
		reply(w, extenderv1.HostPriorityList{})
		return "refused"
	}
	all := scorePool.Get().(*extenderv1.HostPriorityList)
	*all = e.sched.PrioritizeInto(*all, args.Pod, *args.NodeNames)
	reply(w, scoredOnly(*all))
	clear(*all) // drop the node names until the next call
	scorePool.Put(all)
	return "ok"
}

// serveBind handles POST /bind: ExtenderBindingArgs (pod name, namespace, UID and node all
// required) answered with Extender.Bind's error, if any, in ExtenderBindingResult.Error. It
// returns the outcome for the verb's metrics: "ok", "refused" (the bind failed) or
// "bad_request".
func (e *Extender) serveBind(w http.ResponseWriter, r *http.Request) string {
	var args extenderv1.ExtenderBindingArgs
	if !decode(w, r, &args) {
		return "bad_request"
	}
	if args.PodName == "" || args.PodNamespace == "" || args.PodUID == "" || args.Node == "" {
		http.Error(w, fmt.Sprintf("ExtenderBindingArgs needs PodName, PodNamespace, PodUID and Node; got %q, %q, %q, %q", args.PodName, args.PodNamespace, args.PodUID, args.Node), http.StatusBadRequest)
		return "bad_request"
	}
	err := e.Bind(r.Context(), device.PodRef{Namespace: args.PodNamespace, Name: args.PodName, UID: args.PodUID}, args.Node)
	if err != nil {
		reply(w, extenderv1.ExtenderBindingResult{Error: err.Error()})
		return "refused"
	}
	reply(w, extenderv1.ExtenderBindingResult{})
	return "ok"
}

// servePreempt handles POST /preempt: ExtenderPreemptionArgs answered with Scheduler.Preempt's
// result, or with no node while the verbs refuse. It returns the outcome for the verb's
// metrics: "ok", "refused" or "bad_request".
func (e *Extender) servePreempt(w http.ResponseWriter, r *http.Request) string {
	var args extenderv1.ExtenderPreemptionArgs
	if !decode(w, r, &args) {
		return "bad_request"
	}
	if e.refusal() != nil {
		reply(w, extenderv1.ExtenderPreemptionResult{NodeNameToMetaVictims: map[string]*extenderv1.MetaVictims{}})
		return "refused"
	}
	reply(w, e.sched.Preempt(&args))
	return "ok"
}

// refusedFilter is /filter's answer while the verbs refuse (before Ready: ErrNotReady; also
// ErrStopping, ErrNotLeading, ErrHandOver, leader.go): no node fits, each failed with why in
// FailedNodes (resolvable: kube-scheduler may try preemption, and /preempt then keeps no victims).
func refusedFilter(names []string, why error) extenderv1.ExtenderFilterResult {
	failed := make(extenderv1.FailedNodesMap, len(names))
	for _, n := range names {
		failed[n] = why.Error()
	}
	return extenderv1.ExtenderFilterResult{NodeNames: &[]string{}, FailedNodes: failed}
}

// registerHealth adds /healthz, /readyz and /metrics to mux (see MetricsHandler).
func (e *Extender) registerHealth(mux *http.ServeMux, gatherer prometheus.Gatherer) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok\n") })
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !e.Ready() {
			http.Error(w, "cache not rebuilt from the API yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n")
	})
	if gatherer != nil {
		mux.Handle("GET /metrics", hmetrics.Handler(gatherer, e.registerer))
	}
}

// scorePool holds full score lists between prioritize calls (5,000 nodes: 120 KB each).
var scorePool = sync.Pool{New: func() any { return new(extenderv1.HostPriorityList) }}

// scoredOnly drops the hosts scored 0, keeping the order of the others, unless no host scores
// above 0 (then the list is kept whole). kube-scheduler adds each listed host's score × weight
// to that node's total and nothing for a host left out (k8s.io/kubernetes
// pkg/scheduler/schedule_one.go, prioritizeNodes), so every node's total is the same, and its
// encoding/json decoder reads only the scored hosts: a full list of 5,000 costs it about 3 ms
// per pod (docs/bench/report.md). What changes is its tie-break among equal totals: it draws a
// random tie-breaker only for hosts an extender listed, so a host left out never wins a tie
// against a listed one (which scores higher here); keeping the whole list when nothing scores
// keeps the random draw among all-equal nodes.
func scoredOnly(l extenderv1.HostPriorityList) extenderv1.HostPriorityList {
	n := 0
	for _, h := range l {
		if h.Score != 0 {
			n++
		}
	}
	if n == 0 {
		return l
	}
	out := make(extenderv1.HostPriorityList, 0, n)
	for _, h := range l {
		if h.Score != 0 {
			out = append(out, h)
		}
	}
	return out
}

// verb wraps a handler with panic recovery and metrics.
func (e *Extender) verb(name string, h func(http.ResponseWriter, *http.Request) string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		start := e.clock.Now()
		outcome := "error"
		defer func() {
			if p := recover(); p != nil {
				klog.ErrorS(fmt.Errorf("panic: %v", p), "Extender handler panicked", "verb", name, "stack", string(debug.Stack()))
				http.Error(w, fmt.Sprintf("internal error in %s: %v", name, p), http.StatusInternalServerError)
			}
			e.metrics.observe(name, outcome, e.clock.Since(start).Seconds())
		}()
		r.Body = http.MaxBytesReader(w, r.Body, maxBody)
		outcome = h(w, r)
	}
}

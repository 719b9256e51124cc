package dra

import (
	"fmt"
	"net/http"
	"sync/atomic"

	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// Registration answers the driver's /readyz: ready once the kubelet has registered the driver
// (the kubeletplugin helper's RegistrationStatus, set by the kubelet's NotifyRegistrationStatus
// call). Before that the kubelet refuses every prepare of the driver's claims with "DRA driver
// gpu.hami-go.io is not registered" and retries the pod only at its next sync (about a
// minute), so the DaemonSet's readiness probe reads this: a rollout or `kubectl rollout status`
// waits for the registration, not only the process start.
type Registration struct {
	status atomic.Pointer[func() (bool, string)]
}

// Set makes the kubeletplugin helper h the source of the registration status.
func (r *Registration) Set(h *kubeletplugin.Helper) {
	f := func() (bool, string) {
		st := h.RegistrationStatus()
		if st == nil {
			return false, ""
		}
		return st.PluginRegistered, st.Error
	}
	r.status.Store(&f)
}

// setFunc sets the status source directly (tests).
func (r *Registration) setFunc(f func() (registered bool, reason string)) { r.status.Store(&f) }

// ServeHTTP answers 200 "ok" when registered, else 503 with the reason (the kubelet's error
// when it refused the registration).
func (r *Registration) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	f := r.status.Load()
	if f == nil {
		http.Error(w, "the kubelet plugin helper has not started", http.StatusServiceUnavailable)
		return
	}
	ok, reason := (*f)()
	switch {
	case ok:
		fmt.Fprintln(w, "ok")
	case reason != "":
		http.Error(w, "the kubelet refused the registration: "+reason, http.StatusServiceUnavailable)
	default:
		http.Error(w, "not registered with the kubelet yet", http.StatusServiceUnavailable)
	}
}

// withReadyz serves /readyz from r and everything else from h.
func withReadyz(h http.Handler, r *Registration) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/readyz", r)
	mux.Handle("/", h)
	return mux
}

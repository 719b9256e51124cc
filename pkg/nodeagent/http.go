package nodeagent

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/metrics"
)

// FaultInjector is the fake backend's fault API (pkg/fake Fleet): InjectXID makes the GPU's
// event set deliver xid; Recover makes its probes succeed again.
type FaultInjector interface {
	InjectXID(uuid string, xid uint64) error
	Recover(uuid string) error
}

// Handler serves /metrics (reg; a bad series is left out, not the scrape: metrics.Handler, case
// C35), /healthz, and, when faults is not nil, POST
// /debug/fake/xid?uuid=&xid= and POST /debug/fake/recover?uuid=. Panics in handlers become
// 500 responses.
func Handler(reg *prometheus.Registry, faults FaultInjector) http.Handler {
	mux := metrics.NewMux(reg)
	if faults != nil {
		mux.HandleFunc("/debug/fake/xid", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "use POST", http.StatusMethodNotAllowed)
				return
			}
			uuid, xs := r.URL.Query().Get("uuid"), r.URL.Query().Get("xid")
			xid, err := strconv.ParseUint(xs, 10, 64)
			if err != nil {
				http.Error(w, fmt.Sprintf("xid: %q is not an XID number", xs), http.StatusBadRequest)
				return
			}
			if err := faults.InjectXID(uuid, xid); err != nil {
				http.Error(w, fmt.Sprintf("uuid %q: %v", uuid, err), http.StatusBadRequest)
				return
			}
			klog.InfoS("Injected fake XID", "uuid", uuid, "xid", xid)
			fmt.Fprintf(w, "injected XID %d on %s\n", xid, uuid)
		})
		mux.HandleFunc("/debug/fake/recover", func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				http.Error(w, "use POST", http.StatusMethodNotAllowed)
				return
			}
			uuid := r.URL.Query().Get("uuid")
			if err := faults.Recover(uuid); err != nil {
				http.Error(w, fmt.Sprintf("uuid %q: %v", uuid, err), http.StatusBadRequest)
				return
			}
			klog.InfoS("Fake GPU recovers (probes succeed from now on)", "uuid", uuid)
			fmt.Fprintf(w, "%s recovers\n", uuid)
		})
	}
	return recoverHTTP(mux)
}

func recoverHTTP(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				klog.ErrorS(fmt.Errorf("%v", v), "Panic in HTTP handler", "path", r.URL.Path)
				http.Error(w, "internal error", http.StatusInternalServerError)
			}
		}()
		h.ServeHTTP(w, r)
	})
}

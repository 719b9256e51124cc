package webhook

import (
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"k8s.io/client-go/kubernetes/fake"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"
)

// The server's Admission.Mode decides what /mutate-pods does: dra needs an API client and
// serves claims; deviceplugin routes to the extender (the --mode flag's effect).
func TestServerMode(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Mode = ModeDRA
	if _, err := NewServer(ServerConfig{Port: 9443, Admission: cfg, HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "mode dra: no API client") {
		t.Fatalf("err = %v", err)
	}
	for _, tc := range []struct {
		mode Mode
		want string // a patch path only this mode writes
	}{{ModeDRA, "add /spec/resourceClaims"}, {ModeDevicePlugin, "replace /spec/schedulerName"}} {
		cfg.Mode = tc.mode
		s, err := NewServer(ServerConfig{Port: 9443, Admission: cfg, Client: fake.NewClientset(), HealthAddress: "127.0.0.1:0", MetricsAddress: "127.0.0.1:0"})
		if err != nil {
			t.Fatal(err)
		}
		s.health.Close()
		s.metrics.Close()
		h := s.handlers[PathPods].(*admission.Webhook).Handler
		r := run(t, h, admissionv1.Create, "team-a", newPod(ctr("main", "nvidia.com/gpu", "1", "nvidia.com/gpumem", "1000")))
		if !strings.Contains(strings.Join(r.paths, ","), tc.want) {
			t.Errorf("mode %s: patch %v, want %q", tc.mode, r.paths, tc.want)
		}
	}
}

package extender

import (
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// Each timer of the extender is its own Config field, validated by name.
func TestConfigTimersValidated(t *testing.T) {
	for name, set := range map[string]func(*Config){
		"reservation TTL": func(c *Config) { c.ReservationTTL = 0 },
		"gone TTL":        func(c *Config) { c.GoneTTL = 0 },
		"sweep interval":  func(c *Config) { c.SweepInterval = 0 },
	} {
		t.Run(name, func(t *testing.T) {
			c := DefaultConfig()
			set(&c)
			if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), name+": ") {
				t.Fatalf("Validate = %v, want an error naming %q", err, name)
			}
		})
	}
}

// cacheWith is memoCache with cfg.
func cacheWith(t *testing.T, cfg Config, inv device.Inventory) (*Cache, *clocktesting.FakeClock) {
	t.Helper()
	clk := clocktesting.NewFakeClock(t0)
	c := NewCache(cfg, clk)
	enc, err := device.EncodeInventory(inv)
	if err != nil {
		t.Fatal(err)
	}
	renew := metav1.NewMicroTime(t0)
	c.OnNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: inv.Node, Annotations: map[string]string{device.AnnoInventory: enc}}})
	c.OnLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: device.LeasePrefix + inv.Node},
		Spec: coordinationv1.LeaseSpec{RenewTime: &renew}})
	return c, clk
}

// A released pod is remembered for GoneTTL, however short the reservation TTL (which used to
// set it: ten times the reservation TTL), and forgotten after it.
func TestGoneTTLIsItsOwnTimer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReservationTTL = time.Second
	cfg.GoneTTL = time.Hour
	cfg.StaleAfter = 24 * time.Hour // the Lease is not renewed in this test
	c, clk := cacheWith(t, cfg, testInventory("node-1", 1, 24576, 4))
	p := podtest.Pending("ns", "p", podtest.GPU("main", 1, "1000", 0))
	req, _, err := c.ParseRequest(p)
	if err != nil {
		t.Fatal(err)
	}
	c.Release(device.RefOf(p))
	clk.Step(59 * time.Minute) // far past 10 × ReservationTTL
	c.Sweep()
	if _, _, err := NewScheduler(c).BookForBind(device.RefOf(p), req, "node-1"); err == nil || !strings.Contains(err.Error(), "was deleted or has ended") {
		t.Fatalf("bind of a released pod within GoneTTL: %v, want a refusal", err)
	}
	clk.Step(2 * time.Minute)
	c.Sweep()
	if _, _, err := NewScheduler(c).BookForBind(device.RefOf(p), req, "node-1"); err != nil {
		t.Fatalf("bind after GoneTTL: %v", err)
	}
}

// A reservation goes after ReservationTTL, not after GoneTTL.
func TestReservationTTLIsItsOwnTimer(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ReservationTTL = 10 * time.Second
	cfg.GoneTTL = time.Hour
	c, clk := cacheWith(t, cfg, testInventory("node-1", 1, 24576, 4))
	p := podtest.Pending("ns", "p", podtest.GPU("main", 1, "1000", 0))
	if res := NewScheduler(c).Filter(p, []string{"node-1"}); len(*res.NodeNames) != 1 {
		t.Fatalf("filter: %+v", res)
	}
	if n, st, _ := c.PodState(device.RefOf(p)); n != "node-1" || st != "reserved" {
		t.Fatalf("after Filter: %q %q, want reserved on node-1", n, st)
	}
	clk.Step(11 * time.Second)
	c.Sweep()
	if n, _, _ := c.PodState(device.RefOf(p)); n != "" {
		t.Fatalf("reservation kept on %q after ReservationTTL", n)
	}
}

package extender

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
)

// Config.SerializeSameKey (issue 15 option (a)): an identical pod (same call key, same
// signature) waits behind an in-flight one on the node, and proceeds once that one is claimed;
// with the default (false) the two are in flight together (TestC20BindSerialization's twin).
func TestSerializeSameKeyIdenticalPodsWait(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 2, 81920, 10))
	cfg := DefaultConfig()
	cfg.SerializeSameKey = true
	cfg.BindWait = time.Hour
	cfg.ReservationTTL = 24 * time.Hour
	cfg.SweepInterval = 24 * time.Hour
	e := newEnv(t, &cfg, objs...)
	e.waitNodes(names...)
	first := podtest.Pending("default", "first", podtest.GPU("main", 1, "600", 0))
	twin := podtest.Pending("default", "twin", podtest.GPU("main", 1, "600", 0))
	two := podtest.Pending("default", "two", podtest.GPU("main", 2, "600", 0))
	e.create(first, twin, two)
	if _, err := e.schedule(first, names); err != nil {
		t.Fatal(err)
	}
	// A different call key (2 GPUs) never waits.
	if _, err := e.schedule(two, names); err != nil {
		t.Fatalf("two: %v", err)
	}
	e.ext.sched.Filter(twin, names)
	ch := bindAndWaitBlocked(t, e, twin, "node-1")
	select {
	case err := <-ch:
		t.Fatalf("identical pod's bind did not wait: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	p := e.getPod("default", "first")
	p.Annotations[device.AnnoClaimed] = p.Annotations[device.AnnoPlanned]
	e.updatePod(p)
	select {
	case err := <-ch:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("twin still waiting after first was claimed")
	}
	checkInvariants(t, e.ext.cache)
}

// With SerializeSameKey, the wait ends in a refusal after BindWait that names the blocker and
// says the requests are the same; with the default, the identical pod binds at once.
func TestSerializeSameKeyRefusalAndDefault(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(map[bool]string{false: "default-off", true: "on"}[on], func(t *testing.T) {
			objs, names := setupNodes(t, testInventory("node-1", 2, 81920, 10))
			cfg := DefaultConfig()
			cfg.SerializeSameKey = on
			e := newEnv(t, &cfg, objs...)
			e.waitNodes(names...)
			first := podtest.Pending("default", "first", podtest.GPU("main", 1, "600", 0))
			twin := podtest.Pending("default", "twin", podtest.GPU("main", 1, "600", 0))
			e.create(first, twin)
			if _, err := e.schedule(first, names); err != nil {
				t.Fatal(err)
			}
			if !on {
				if _, err := e.schedule(twin, names); err != nil {
					t.Fatalf("twin with the option off: %v", err)
				}
				return
			}
			e.ext.sched.Filter(twin, names)
			ch := bindAndWaitBlocked(t, e, twin, "node-1")
			e.clock.Step(cfg.BindWait + time.Millisecond)
			err := <-ch
			var r *BindRefusal
			if !errors.As(err, &r) || !strings.Contains(r.Reason, "default/first") || !strings.Contains(r.Reason, "and the same GPU request") {
				t.Fatalf("twin's bind: %v", err)
			}
		})
	}
}

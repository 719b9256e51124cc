package extender

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hami-go/hami-go/internal/podtest"
	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/podevents/podeventstest"
)

// scrape GETs /metrics of the extender's handler and returns the status and body.
func scrape(t *testing.T, e *env) (int, string) {
	t.Helper()
	srv := httptest.NewServer(e.ext.Handler(e.reg))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

// seriesLines returns the lines of body that start with name{ and contain every part.
func seriesLines(body, name string, parts ...string) []string {
	var out []string
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, name+"{") {
			continue
		}
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			out = append(out, l)
		}
	}
	return out
}

// case C34 and C35: pod a/p (60000 MiB claimed on an 81920 MiB GPU) is deleted and re-created
// under the same name, asking 20000 MiB, while the extender's pod watch is down (the fake
// clientset's watch drops events); kube-scheduler places the new pod meanwhile. Then the watch
// ends with 410 Gone: the reflector relists and the informer delivers ONE update from the old
// UID to the new one, and no delete.
//
// While both pods are booked, the scrape answers 200 with both pods' series, told apart by
// pod_uid (C35; before: two series with one label set, HTTP 500 for the whole scrape). After the
// relist the old booking is released (C34; before: kept for ever): the GPU holds 20000 MiB, and
// a pod asking the 61920 MiB left fits.
func TestC34RelistReleasesPodRecreatedUnderSameName(t *testing.T) {
	inv := testInventory("node-1", 1, 81920, 10)
	objs, names := setupNodes(t, inv)
	g := inv.GPUs[0].UUID
	old := boundPod(t, "a", "p", "node-1", g, 60000, true)
	var gate *podeventstest.WatchGate
	e := newEnvSetup(t, nil, func(c *fake.Clientset) { gate = podeventstest.Gate(c, "pods") }, append(objs, old)...)
	e.waitNodes("node-1")
	if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 60000 || u.Sharers != 1 {
		t.Fatalf("before: GPU usage %+v, want 60000 MiB, 1 sharer", u)
	}

	gate.Deafen()
	e.deletePod("a", "p")
	fresh := podtest.Pending("a", "p", podtest.GPU("main", 1, "20000", 0))
	fresh.UID = types.UID("uid-a-p-recreated")
	e.create(fresh)
	if node, err := e.schedule(fresh, names); err != nil || node != "node-1" {
		t.Fatalf("scheduling the re-created pod: node %q, %v", node, err)
	}
	if _, st, _ := e.ext.cache.PodState(device.RefOf(old)); st != "claimed" {
		t.Fatalf("the deaf watch delivered the delete: old pod's stage %q", st)
	}

	// C35: two bookings of one namespace/name (the old one not yet released) scrape fine.
	code, body := scrape(t, e)
	if code != http.StatusOK {
		t.Fatalf("C35: /metrics answered %d with old and new pod a/p booked, want 200:\n%s", code, body)
	}
	const podMem = "hami_go_extender_pod_allocated_memory_mib"
	for uid, want := range map[types.UID]string{old.UID: "} 60000", fresh.UID: "} 20000"} {
		l := seriesLines(body, podMem, `namespace="a"`, `pod="p"`, `pod_uid="`+string(uid)+`"`)
		if len(l) != 1 || !strings.HasSuffix(l[0], want) {
			t.Errorf("C35: series of pod a/p uid %s: %q, want one ending %q", uid, l, want)
		}
	}
	if l := seriesLines(body, "hami_go_extender_gpu_allocated_memory_mib", `uuid="`+g+`"`); len(l) != 1 || !strings.HasSuffix(l[0], "} 80000") {
		t.Errorf("C35: GPU series %q, want 80000 MiB", l)
	}

	// C34: the watch ends with 410; the relist's update across UIDs releases the old pod.
	watches := gate.Watches()
	expired := time.Now()
	gate.Expire()
	eventually(t, "the relist to release the old pod's booking", func() bool {
		_, st, _ := e.ext.cache.PodState(device.RefOf(old))
		return st == ""
	})
	t.Logf("relisted %v after the 410", time.Since(expired))
	eventually(t, "a new watch after the relist", func() bool { return gate.Watches() > watches })
	if _, st, _ := e.ext.cache.PodState(device.RefOf(fresh)); st != "planned" {
		t.Errorf("the re-created pod's stage is %q, want planned", st)
	}
	if u := gpuUse(e.ext.cache, "node-1", 0); u.MemoryMiB != 20000 || u.Sharers != 1 {
		t.Errorf("after the relist: GPU usage %+v, want 20000 MiB, 1 sharer", u)
	}
	later := podtest.Pending("a", "later", podtest.GPU("main", 1, "61920", 0))
	if res := e.ext.sched.Filter(later, names); len(*res.NodeNames) != 1 {
		t.Errorf("a pod asking the 61920 MiB left does not fit: %v", res.FailedNodes)
	}
	code, body = scrape(t, e)
	if l := seriesLines(body, podMem, `pod="p"`); code != http.StatusOK || len(l) != 1 || !strings.Contains(l[0], string(fresh.UID)) {
		t.Errorf("after the relist: status %d, pod a/p series %q, want only the new pod's", code, l)
	}
	checkInvariants(t, e.ext.cache)
}

// case C34: a refused pod that is deleted (or replaced by a pod of its name: another key) is no
// longer handed out for a requeue: its refusal goes with it. Before: a later release within
// requeueWindow handed out the gone key, and the extender patched a pod that was not there.
func TestC34ReleaseForgetsRefusal(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	c := NewCache(DefaultConfig(), clk)
	gone := device.PodRef{Namespace: "r", Name: "p", UID: "uid-old"}
	c.refusals.refused(gone, t0)
	c.Release(gone)
	b := boundPod(t, "r", "holder", "node-1", "GPU-0", 1000, true)
	c.OnPod(b)
	clk.Step(time.Second)
	c.Release(device.RefOf(b))
	if got, _ := c.RefusedBeforeRelease(); len(got) != 0 {
		t.Fatalf("handed out %v for a requeue after their pods were released", got)
	}
}

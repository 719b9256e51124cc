//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
)

// podTimes are the moments one pod of a burst passed each step, as this test process saw them
// through watches (millisecond resolution; zero: not seen). Prepared is the DRA driver's
// "Prepared" log line for the pod's claim; KubeletAdd, Sandbox and Started are the kubelet's
// "SyncLoop ADD" and its first and second PLEG ContainerStarted (the sandbox, then the
// container) log lines (klog times, same machine clock).
type podTimes struct {
	ClaimCreated, Allocated, Bound, KubeletAdd, Prepared, Sandbox, Started, Running time.Time
}

// burstTimeline records, from watches on a namespace's pods and ResourceClaims, when each pod
// of a burst was bound, its claim created and allocated, and when it ran (issue 13's burst
// breakdown; logged, never asserted).
type burstTimeline struct {
	mu     sync.Mutex
	pods   map[string]*podTimes
	claims map[string]string // claim name -> pod name (owner)
	stop   func()
	done   chan struct{}
}

// watchBurst starts recording ns; call stopAndLog when the burst is over.
func (c *Cluster) watchBurst(t testing.TB, ns string) *burstTimeline {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	b := &burstTimeline{pods: map[string]*podTimes{}, claims: map[string]string{}, stop: cancel, done: make(chan struct{})}
	pw, err := c.Client.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch pods of %s: %v", ns, err)
	}
	cw, err := c.Client.ResourceV1().ResourceClaims(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("watch ResourceClaims of %s: %v", ns, err)
	}
	go func() {
		defer close(b.done)
		defer pw.Stop()
		defer cw.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case ev, ok := <-pw.ResultChan():
				if !ok {
					return
				}
				b.onPod(ev)
			case ev, ok := <-cw.ResultChan():
				if !ok {
					return
				}
				b.onClaim(ev)
			}
		}
	}()
	return b
}

func (b *burstTimeline) times(pod string) *podTimes {
	pt := b.pods[pod]
	if pt == nil {
		pt = &podTimes{}
		b.pods[pod] = pt
	}
	return pt
}

func setOnce(t *time.Time, now time.Time) {
	if t.IsZero() {
		*t = now
	}
}

func (b *burstTimeline) onPod(ev watch.Event) {
	p, ok := ev.Object.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	pt := b.times(p.Name)
	if p.Spec.NodeName != "" {
		setOnce(&pt.Bound, now)
	}
	if allStarted(p) {
		setOnce(&pt.Running, now)
	}
}

func (b *burstTimeline) onClaim(ev watch.Event) {
	rc, ok := ev.Object.(*resourcev1.ResourceClaim)
	if !ok {
		return
	}
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	owner := ""
	for _, o := range rc.OwnerReferences {
		if o.Kind == "Pod" {
			owner = o.Name
		}
	}
	if owner == "" {
		return
	}
	b.claims[rc.Name] = owner
	pt := b.times(owner)
	setOnce(&pt.ClaimCreated, now)
	if rc.Status.Allocation != nil {
		setOnce(&pt.Allocated, now)
	}
}

// preparedLine is pkg/dra's V(2) "Prepared" line: klog header time and the claim.
var preparedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Prepared" .*claim="([^/"]+)/([^"]+)"`)

// kubeletLine is a kubelet log line about one pod of a namespace: klog time, namespace, pod.
var kubeletLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*pods?=\[?"([^/"]+)/([^"]+)"`)

// klogTime parses a klog header time ("1201 08:14:57.465210", this year, local time).
func klogTime(s string) (time.Time, bool) {
	ts, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", time.Now().Year(), s), time.Local)
	return ts, err == nil
}

// readKubelet adds the kubelet's ADD, sandbox and container start times of ns's pods from
// the kubelet log, from offset on.
func (b *burstTimeline) readKubelet(t testing.TB, c *Cluster, ns string, offset int64) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(c.State, "logs", "kubelet.log"))
	if err != nil || int64(len(raw)) < offset {
		t.Logf("kubelet log: %v", err)
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, l := range strings.Split(string(raw[offset:]), "\n") {
		m := kubeletLine.FindStringSubmatch(l)
		if m == nil || m[2] != ns {
			continue
		}
		ts, ok := klogTime(m[1])
		if !ok {
			continue
		}
		pt := b.times(m[3])
		switch {
		case strings.Contains(l, `"SyncLoop ADD"`):
			setOnce(&pt.KubeletAdd, ts)
		case strings.Contains(l, `"Type":"ContainerStarted"`):
			if pt.Sandbox.IsZero() {
				pt.Sandbox = ts
			} else {
				setOnce(&pt.Started, ts)
			}
		}
	}
}

// readPrepared adds the driver's "Prepared" times of ns's claims from the driver pod's log.
func (b *burstTimeline) readPrepared(t testing.TB, c *Cluster, ns string) {
	t.Helper()
	drv := c.driverPod(t)
	log := c.Logs(t, chartNamespace, drv.Name, drv.Spec.Containers[0].Name)
	b.mu.Lock()
	defer b.mu.Unlock()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	throttled := 0
	for sc.Scan() {
		if strings.Contains(sc.Text(), "client-side throttling") && strings.Contains(sc.Text(), "/namespaces/"+ns+"/") {
			throttled++
			if throttled <= 3 {
				t.Logf("driver: %s", sc.Text())
			}
		}
		m := preparedLine.FindStringSubmatch(sc.Text())
		if m == nil || m[2] != ns {
			continue
		}
		ts, ok := klogTime(m[1])
		if !ok {
			continue
		}
		if pod, ok := b.claims[m[3]]; ok {
			setOnce(&b.times(pod).Prepared, ts)
		}
	}
	t.Logf("driver log: %d lines on client-side throttling (logged from 1 s of waiting)", throttled)
}

// stopAndLog ends the recording and logs, for each step, when the pods reached it (p50, p90
// and max after start) and the median time each step took, plus the namespace's
// FailedScheduling events (kube-scheduler attempts that found no room).
func (b *burstTimeline) stopAndLog(t testing.TB, c *Cluster, ns string, start time.Time, kubeletOffset int64, dra bool) {
	t.Helper()
	time.Sleep(time.Second) // let the last watch events in
	if dra {
		b.readPrepared(t, c, ns)
	}
	b.readKubelet(t, c, ns, kubeletOffset)
	b.stop()
	<-b.done
	b.mu.Lock()
	defer b.mu.Unlock()
	type step struct {
		name string
		at   func(*podTimes) time.Time
	}
	steps := []step{
		{"claim created", func(p *podTimes) time.Time { return p.ClaimCreated }},
		{"allocated", func(p *podTimes) time.Time { return p.Allocated }},
		{"bound", func(p *podTimes) time.Time { return p.Bound }},
		{"kubelet ADD", func(p *podTimes) time.Time { return p.KubeletAdd }},
		{"prepared", func(p *podTimes) time.Time { return p.Prepared }},
		{"sandbox", func(p *podTimes) time.Time { return p.Sandbox }},
		{"started", func(p *podTimes) time.Time { return p.Started }},
		{"running", func(p *podTimes) time.Time { return p.Running }},
	}
	if !dra {
		steps = []step{steps[2], steps[3], steps[5], steps[6], steps[7]}
	}
	var lines []string
	prev := func(p *podTimes, i int) time.Time {
		if i == 0 {
			return start
		}
		return steps[i-1].at(p)
	}
	for i, s := range steps {
		var at, took []time.Duration
		for _, p := range b.pods {
			if v := s.at(p); !v.IsZero() {
				at = append(at, v.Sub(start))
				if pv := prev(p, i); !pv.IsZero() {
					took = append(took, v.Sub(pv))
				}
			}
		}
		lines = append(lines, fmt.Sprintf("  %-13s n=%2d  reached at p50 %6s p90 %6s max %6s | step took p50 %6s max %6s",
			s.name, len(at), pct(at, 50), pct(at, 90), pct(at, 100), pct(took, 50), pct(took, 100)))
	}
	failed := 0
	if l, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{}); err == nil {
		for _, e := range l.Items {
			if e.Reason == "FailedScheduling" {
				failed += int(max(e.Count, 1))
			}
		}
	}
	t.Logf("burst timeline of %s (from the first create at %s):\n%s\n  FailedScheduling events: %d", ns, start.Format("15:04:05.000"), strings.Join(lines, "\n"), failed)
}

// pct is the p-th percentile of ds (nearest rank), rounded to 10 ms; "-" when empty.
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	i := (len(ds)*p + 99) / 100
	if i < 1 {
		i = 1
	}
	return ds[i-1].Round(10 * time.Millisecond).String()
}

// timedBurstTimeline is timedBurst that also logs the burst's timeline (dra: with claim steps
// and the driver's prepare times).
func (c *Cluster) timedBurstTimeline(t *testing.T, ns string, pods []*corev1.Pod, dra bool) ([]corev1.Pod, time.Duration) {
	t.Helper()
	c.waitNodeQuiet(t, 3*time.Minute)
	b := c.watchBurst(t, ns)
	off := c.kubeletLogSize(t)
	start := time.Now()
	c.createPods(t, pods)
	running := c.waitAllRunning(t, ns, len(pods), 5*time.Minute)
	took := time.Since(start)
	b.stopAndLog(t, c, ns, start, off, dra)
	return running, took
}

// waitNodeQuiet waits until the kubelet runs no pod sandbox the API no longer lists (the
// kubelet_running_pods gauge, read through the API server's node proxy, equals the node's
// pods that are not terminal), so a burst does not share the node with the teardown of the
// one before (force-deleted pods leave the API at once; their sandboxes stop later).
func (c *Cluster) waitNodeQuiet(t testing.TB, timeout time.Duration) {
	t.Helper()
	start := time.Now()
	var running, listed int
	err := wait.PollUntilContextTimeout(context.Background(), time.Second, timeout, true, func(ctx context.Context) (bool, error) {
		raw, err := c.Client.CoreV1().RESTClient().Get().AbsPath("/api/v1/nodes", c.NodeName, "proxy", "metrics").DoRaw(ctx)
		if err != nil {
			return false, nil
		}
		running = -1
		for _, l := range strings.Split(string(raw), "\n") {
			if v, ok := strings.CutPrefix(l, "kubelet_running_pods "); ok {
				running, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		l, err := c.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + c.NodeName})
		if err != nil {
			return false, nil
		}
		listed = 0
		for _, p := range l.Items {
			if p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
				listed++
			}
		}
		return running == listed, nil
	})
	if err != nil {
		t.Logf("node not quiet after %v: the kubelet runs %d pod sandboxes, the API lists %d pods on it; timing anyway", timeout, running, listed)
		return
	}
	if d := time.Since(start); d > time.Second {
		t.Logf("waited %v for the node to finish tearing down earlier pods", d.Round(100*time.Millisecond))
	}
}

//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// podTimes are the moments one pod of a burst passed each step, as this test process saw them
// through watches (millisecond resolution; zero: not seen). Prepared is the DRA driver's
// "Prepared" log line for the pod's claim (klog time, same machine clock).
type podTimes struct {
	ClaimCreated, Allocated, Bound, Prepared, Running time.Time
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
var preparedLine = regexp.MustCompile(`^I(\d{4} \d{2}:\d{2}:\d{2}\.\d{6}) .*"Prepared" claim="([^/"]+)/([^"]+)"`)

// readPrepared adds the driver's "Prepared" times of ns's claims from the driver pod's log.
func (b *burstTimeline) readPrepared(t testing.TB, c *Cluster, ns string) {
	t.Helper()
	drv := c.driverPod(t)
	log := c.Logs(t, chartNamespace, drv.Name, drv.Spec.Containers[0].Name)
	year := time.Now().UTC().Year()
	b.mu.Lock()
	defer b.mu.Unlock()
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	throttled := 0
	for sc.Scan() {
		if strings.Contains(sc.Text(), "client-side throttling") {
			throttled++
			if throttled <= 3 {
				t.Logf("driver: %s", sc.Text())
			}
		}
		m := preparedLine.FindStringSubmatch(sc.Text())
		if m == nil || m[2] != ns {
			continue
		}
		ts, err := time.ParseInLocation("2006 0102 15:04:05.000000", fmt.Sprintf("%d %s", year, m[1]), time.Local)
		if err != nil {
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
func (b *burstTimeline) stopAndLog(t testing.TB, c *Cluster, ns string, start time.Time, dra bool) {
	t.Helper()
	time.Sleep(time.Second) // let the last watch events in
	if dra {
		b.readPrepared(t, c, ns)
	}
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
		{"prepared", func(p *podTimes) time.Time { return p.Prepared }},
		{"running", func(p *podTimes) time.Time { return p.Running }},
	}
	if !dra {
		steps = []step{steps[2], steps[4]}
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
	t.Logf("burst timeline of %s (from the first create; watch times):\n%s\n  FailedScheduling events: %d", ns, strings.Join(lines, "\n"), failed)
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
	b := c.watchBurst(t, ns)
	start := time.Now()
	c.createPods(t, pods)
	running := c.waitAllRunning(t, ns, len(pods), 5*time.Minute)
	took := time.Since(start)
	b.stopAndLog(t, c, ns, start, dra)
	return running, took
}

//go:build e2e && upgrade

package e2e

// The upgrade test (issue 28: "upgrade with running pods"). It is not part of the main suite: it
// builds with the tags e2e and upgrade (make test-upgrade), and it needs a cluster without the
// chart (HAMI_GO_SKIP_CHART=1 hack/cluster/up.sh), because it installs the previous release itself.

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/hami-go/hami-go/pkg/device"
)

const (
	// upgradeBurstMax is the most pods of a burst in flight through the upgrade (or the node
	// agent's next rollout): one every upgradeBurstEvery from just before it until it is done
	// (at least upgradeBurstMin of them). Two bursts, the old pods and the fill stay within
	// the node's 80 slices.
	upgradeBurstMax   = 30
	upgradeBurstMin   = 10
	upgradeBurstEvery = 750 * time.Millisecond
	// rolloutBurstEvery paces the burst through the node agent's rollout (a few seconds).
	rolloutBurstEvery = 200 * time.Millisecond
	upgradeBurstMiB   = 1000
	// upgradeWait bounds the wait for one pod to run (a pod's start took over 2 minutes on the
	// shared 2-core machine, with etcd timing out).
	upgradeWait = 4 * time.Minute
	// hamiGoImages prefixes the images of hami-go's own components (docs/components.md).
	hamiGoImages = "docker.io/hami-go/"
	// draCheckpoint is the DRA driver's checkpoint of prepared claims on the node (chart
	// draDriver: --plugin-data-dir <kubeletDir>/plugins/gpu.hami-go.io; pkg/dra CheckpointName).
	draCheckpoint = "/var/lib/kubelet/plugins/" + draClass + "/prepared-claims.json"
)

// upgradeShape is a running pod of the previous release: its name and GPU limits.
type upgradeShape struct {
	name string
	g    gpuLimits
}

// upgradeOldPods are the sliced pods that run through the upgrade: one slice, one with a compute
// limit, one of two GPUs, and a larger one the test deletes after the upgrade.
var upgradeOldPods = []upgradeShape{
	{"small", gpuLimits{count: 1, memMiB: 1000}},
	{"cores", gpuLimits{count: 1, memMiB: 20000, cores: 30}},
	{"two", gpuLimits{count: 2, memMiB: 4000}},
	{"large", gpuLimits{count: 1, memMiB: 8000}},
}

// previousRelease is what hack/cluster/previous-release.sh printed.
type previousRelease struct {
	commit, tag, chart string
}

// runPreviousRelease runs hack/cluster/previous-release.sh <cmd> and parses its key=value lines.
func (c *Cluster) runPreviousRelease(t testing.TB, cmd string) previousRelease {
	t.Helper()
	out := c.clusterScript(t, "previous-release.sh", cmd)
	var r previousRelease
	for _, l := range strings.Split(out, "\n") {
		k, v, _ := strings.Cut(l, "=")
		switch k {
		case "commit":
			r.commit = v
		case "tag":
			r.tag = v
		case "chart":
			r.chart = v
		}
	}
	if cmd != "upgrade" && (r.commit == "" || r.tag == "") {
		t.Fatalf("previous-release.sh %s printed no commit= and tag= lines:\n%s", cmd, out)
	}
	return r
}

// chartVersion is the appVersion of this checkout's chart: the tag of this release's images.
func chartVersion(t testing.TB) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	b, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "charts", "hami-go", "Chart.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^appVersion:\s*"?([^"\s]+)"?`).FindSubmatch(b)
	if m == nil {
		t.Fatal("charts/hami-go/Chart.yaml has no appVersion")
	}
	return string(m[1])
}

// waitChartImages waits until every pod of the chart (its namespace) runs all its containers
// and every hami-go image among them has tag want, none other (old pods gone): the release the
// cluster runs. It returns the pods' names.
func (c *Cluster) waitChartImages(t testing.TB, want string, timeout time.Duration) []string {
	t.Helper()
	var names, wrong []string
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		names, wrong = nil, nil
		for i := range l.Items {
			p := &l.Items[i]
			if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, ctr := range p.Spec.Containers {
				if !strings.HasPrefix(ctr.Image, hamiGoImages) {
					continue
				}
				if !strings.HasSuffix(ctr.Image, ":"+want) {
					wrong = append(wrong, p.Name+"["+ctr.Name+"]="+ctr.Image)
				}
			}
			if !allStarted(p) || p.DeletionTimestamp != nil {
				wrong = append(wrong, p.Name+" ("+string(p.Status.Phase)+")")
			}
			names = append(names, p.Name)
		}
		return len(names) > 0 && len(wrong) == 0, nil
	})
	if err != nil {
		t.Fatalf("the chart's pods in %s do not all run images tagged %s after %v: %v (pods %v)", chartNamespace, want, timeout, wrong, names)
	}
	sort.Strings(names)
	return names
}

// oldPod is a pod running before the upgrade, as it was then.
type oldPod struct {
	shape            upgradeShape
	uid              types.UID
	containerID      string
	env              map[string]string
	planned, claimed string            // device-plugin mode: the allocation annotations
	claims           map[string]string // DRA mode: claim name -> its allocation, as JSON
	claimUIDs        []types.UID
}

// TestUpgradeWithRunningPods (issue 28, case C45): the previous release of the chart and images
// (hack/cluster/previous-release.sh: PREVIOUS_RELEASE, built from that commit) is installed in
// the cluster's mode; sliced pods run on it; a burst of one-slice pods is created one after
// another while `helm upgrade` moves the cluster to this checkout's chart and images (as up.sh
// installs them). Then:
//
//   - every component runs this release's images;
//   - every pod that ran before still runs the same container, never restarted, with its own
//     limits, and its records (device-plugin mode: the planned and claimed allocation annotations;
//     DRA mode: its claims' allocations) are those of before;
//   - every pod of the burst runs with its own slice, charged what it asked (a pod the kubelet
//     failed at admission because the previous release's device plugin stopped without handing
//     over is created again and counted; from a release that hands over, none may fail);
//   - this release's node agent rolled again (what the next upgrade does) under a second burst:
//     it hands over (its Lease released first; case C45), so no pod fails admission and every
//     one runs with its own slice;
//   - no GPU is over-committed;
//   - the new release reads the old release's records: the records decode with this release's
//     decoders (inventory, allocations); an old pod's container, restarted, gets its own limits
//     again (device-plugin mode: the new NRI plugin applies the old plan; DRA mode: the claim
//     prepared by the old driver); the new DRA driver's checkpoint holds the old driver's claims;
//     the node filled to the last MiB by the new scheduler, counting
//     the old pods, refuses one more pod, which runs once an old pod is deleted (device-plugin mode:
//     the new extender frees the old pod's plan; DRA mode: the new driver unprepares the claim the
//     old one prepared, from the old checkpoint);
//   - device-plugin mode: the node's inventory annotation is there throughout the upgrade (the
//     DaemonSet's update is a restart, not a withdrawal).
func TestUpgradeWithRunningPods(t *testing.T) {
	c := NewCluster(t)
	mode := c.nodeMode(t)
	dra := mode == "dra"
	current := chartVersion(t)

	start := time.Now()
	prev := c.runPreviousRelease(t, "install")
	if prev.tag == current {
		t.Fatalf("the previous release's tag %s is this release's: the upgrade would change nothing", prev.tag)
	}
	comps := c.waitChartImages(t, prev.tag, 2*time.Minute)
	t.Logf("mode %s: previous release %s installed (images %s; pods %v) in %v", mode, prev.commit[:7], prev.tag, comps, time.Since(start).Round(time.Second))
	t.Cleanup(func() { c.dumpUpgradeLogs(t) })

	var nsOld, nsBurst, nsFill string
	if dra {
		nsOld, nsBurst, nsFill = draNamespace(t, c), draNamespace(t, c), draNamespace(t, c)
	} else {
		nsOld, nsBurst, nsFill = e2eNamespace(t, c), e2eNamespace(t, c), e2eNamespace(t, c)
	}
	var inv device.Inventory
	if !dra {
		// The old plugin's inventory, read with this release's decoder.
		inv = c.inventory(t)
	}
	draDevs := map[string]draGPU{}
	if dra {
		draDevs = c.draGPUs(t)
	}

	// Sliced pods on the previous release.
	for _, s := range upgradeOldPods {
		c.CreatePod(t, gpuPod(nsOld, s.name, s.g))
	}
	olds := map[string]*oldPod{}
	for _, s := range upgradeOldPods {
		p := c.WaitForRunning(t, nsOld, s.name, upgradeWait)
		o := &oldPod{shape: s, uid: p.UID, containerID: p.Status.ContainerStatuses[0].ContainerID}
		o.env = c.checkSlice(t, p, s.g, dra, true)
		if dra {
			o.claims, o.claimUIDs = c.claimRecords(t, p)
		} else {
			o.planned, o.claimed = p.Annotations[device.AnnoPlanned], p.Annotations[device.AnnoClaimed]
		}
		olds[s.name] = o
	}
	c.checkUsage(t, dra, inv)

	// The burst, in flight through the upgrade.
	ctx, stopWatch := context.WithCancel(context.Background())
	var gaps nodeGaps
	var watchDone sync.WaitGroup
	watchDone.Add(1)
	go func() { defer watchDone.Done(); c.watchNodeRecords(ctx, dra, &gaps) }()
	b := c.startBurst(nsBurst, "burst", upgradeBurstEvery)
	// helm upgrade once the burst's first pods are bound and while it goes on.
	c.waitSomeBound(t, nsBurst, 2, time.Minute)
	upStart := time.Now()
	b.during.Store(true)
	c.runPreviousRelease(t, "upgrade")
	b.during.Store(false)
	took := time.Since(upStart)
	comps = c.waitChartImages(t, current, 3*time.Minute)
	t.Logf("helm upgrade to this release (images %s) took %v; components %v", current, took.Round(time.Second), comps)
	br := b.wait(t)
	stopWatch()
	watchDone.Wait()
	t.Logf("burst: %d pods, %d of them created while helm upgrade ran, %d creations refused while the webhook was away and retried", br.created, br.whileDuring, br.refused)
	if br.whileDuring < 2 {
		t.Errorf("only %d pods of the burst were created while helm upgrade ran: the burst was not in flight", br.whileDuring)
	}
	gaps.report(t, dra)

	// The burst: every pod runs with its own slice. A device plugin of the previous release that
	// does not hand over (it stops serving the kubelet without releasing its Lease first) lets
	// its extender place pods the kubelet then fails at admission: those are created again, as
	// their controller would, and counted; from a release that hands over, none may fail.
	prevHandsOver := handsOver(t, prev)
	burst := c.waitBurstRunning(t, nsBurst, br.created, !prevHandsOver)
	for i := range burst {
		// Created while helm upgrade ran: the previous release's agent may have applied the plan
		// (its env contract).
		c.checkSlice(t, &burst[i], gpuLimits{count: 1, memMiB: upgradeBurstMiB}, dra, true)
	}

	// This release's own rollout of the node agent (what the next helm upgrade does), under a
	// burst: the agent hands over (case C45), so no pod fails admission.
	var nsNext string
	if dra {
		nsNext = draNamespace(t, c)
	} else {
		nsNext = e2eNamespace(t, c)
	}
	nb := c.startBurst(nsNext, "next", rolloutBurstEvery)
	c.waitSomeBound(t, nsNext, 2, time.Minute)
	nb.during.Store(true)
	agent := c.restartAgent(t, dra, 3*time.Minute)
	nb.during.Store(false)
	nr := nb.wait(t)
	t.Logf("node agent %s rolled in %v under a burst of %d pods (%d created during the rollout)", agent.name, agent.took.Round(time.Second), nr.created, nr.whileDuring)
	if nr.whileDuring < 2 {
		t.Errorf("only %d pods of the burst were created while the node agent rolled: the burst was not in flight", nr.whileDuring)
	}
	next := c.waitBurstRunning(t, nsNext, nr.created, false)
	if !dra {
		t.Logf("pods of that burst the extender held back while the agent's Lease was released: %d", c.releasedRefusals(t, nsNext))
	}
	for i := range next {
		c.checkSlice(t, &next[i], gpuLimits{count: 1, memMiB: upgradeBurstMiB}, dra, false)
	}

	// The pods of before: the same containers, never restarted, with their own limits and the
	// records of before.
	for _, s := range upgradeOldPods {
		o := olds[s.name]
		p, err := c.Client.CoreV1().Pods(nsOld).Get(context.Background(), s.name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s/%s after the upgrade: %v", nsOld, s.name, err)
		}
		if p.UID != o.uid || !allStarted(p) || p.Status.ContainerStatuses[0].ContainerID != o.containerID || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: want the container %s of before still running, never restarted:\n%s", s.name, o.containerID, c.describe(nsOld, s.name, p))
			continue
		}
		if env := c.checkSlice(t, p, s.g, dra, true); !sameEnv(env, o.env) {
			t.Errorf("pod %s: env after the upgrade\n%s\nwant that of before\n%s", s.name, envLines(env, "CUDA_", "HAMI_GO_"), envLines(o.env, "CUDA_", "HAMI_GO_"))
		}
		if dra {
			if claims, _ := c.claimRecords(t, p); !sameEnv(claims, o.claims) {
				t.Errorf("pod %s: claims %v after the upgrade, want those of before %v", s.name, claims, o.claims)
			}
		} else if p.Annotations[device.AnnoPlanned] != o.planned || p.Annotations[device.AnnoClaimed] != o.claimed {
			t.Errorf("pod %s: allocation annotations changed by the upgrade:\nplanned %s\nwas     %s\nclaimed %s\nwas     %s",
				s.name, p.Annotations[device.AnnoPlanned], o.planned, p.Annotations[device.AnnoClaimed], o.claimed)
		}
	}
	if dra {
		after := c.draGPUs(t)
		for name, g := range draDevs {
			if after[name].uuid != g.uuid {
				t.Errorf("device %s: UUID %q after the upgrade, %q before", name, after[name].uuid, g.uuid)
			}
		}
		if len(after) != len(draDevs) {
			t.Errorf("%d devices published after the upgrade, %d before", len(after), len(draDevs))
		}
	} else {
		now := c.inventory(t)
		if fmt.Sprint(gpuUUIDs(now)) != fmt.Sprint(gpuUUIDs(inv)) || now.SplitCount != inv.SplitCount {
			t.Errorf("inventory after the upgrade: GPUs %v split %d; before: %v split %d", gpuUUIDs(now), now.SplitCount, gpuUUIDs(inv), inv.SplitCount)
		}
	}
	c.checkUsage(t, dra, inv)

	// An old pod's container restarted under the new release gets its own limits again.
	o := olds["cores"]
	_, cid, _ := strings.Cut(o.containerID, "://")
	if err := syscall.Kill(containerPid(t, cid, "envdump"), syscall.SIGTERM); err != nil {
		t.Fatalf("stop the container of pod cores: %v", err)
	}
	p := c.WaitForPod(t, nsOld, "cores", upgradeWait, "restarted and running", func(p *corev1.Pod) bool {
		return allStarted(p) && p.Status.ContainerStatuses[0].RestartCount > 0
	})
	if env := c.checkSlice(t, p, o.shape.g, dra, true); !sameEnv(sliceEnv(env), sliceEnv(o.env)) {
		t.Errorf("pod cores, its container restarted under the new release: env\n%s\nwant that of before\n%s", envLines(env, "CUDA_", "HAMI_GO_"), envLines(o.env, "CUDA_", "HAMI_GO_"))
	}

	// The node filled to the last MiB by the new scheduler, which counts the old pods.
	fill := c.fillNode(t, nsFill, dra, inv)
	c.checkUsage(t, dra, inv)
	if dra {
		// The new driver prepared the fill pods' claims, so it wrote its checkpoint: the claims
		// the old driver prepared are in it only if it read the old one's.
		ck := readDRACheckpoint(t)
		for i := range fill {
			if _, uids := c.claimRecords(t, &fill[i]); len(uids) == 0 || !ck[uids[0]] {
				t.Errorf("pod %s: its claim %v is not in the driver's checkpoint %s", fill[i].Name, uids, draCheckpoint)
			}
		}
		for _, o := range olds {
			for _, uid := range o.claimUIDs {
				if !ck[uid] {
					t.Errorf("pod %s: claim %s prepared by the previous release is not in the new driver's checkpoint %s (it did not read the old one's)", o.shape.name, uid, draCheckpoint)
				}
			}
		}
	}
	c.CreatePod(t, gpuPod(nsFill, "extra", gpuLimits{count: 1, memMiB: 1000}))
	if dra {
		// kube-scheduler's DynamicResources (no device with room), or NodeResourcesFit when the
		// node's GPU memory total is full too.
		msg := c.waitPodUnschedulable(t, nsFill, "extra", time.Minute)
		if !strings.Contains(msg, draUnschedulable) && !strings.Contains(msg, "Insufficient "+device.ResourceGPUMemory) {
			t.Errorf("pod extra on the full node: %q, want %q", msg, draUnschedulable)
		}
		t.Logf("pod extra on the full node: %s", msg)
	} else {
		t.Logf("pod extra on the full node: %s", c.waitUnschedulable(t, nsFill, "extra"))
	}
	c.stillPending(t, nsFill, "extra", 3*time.Second)
	// Deleting a pod of the previous release frees its slice for it.
	c.deleteNow(t, nsOld, "large")
	if dra {
		for _, uid := range olds["large"].claimUIDs {
			// Template claims go with their pod; the new driver unprepares what the old prepared.
			waitCDISpec(t, uid, false, 2*time.Minute)
		}
	}
	c.WaitForRunning(t, nsFill, "extra", upgradeWait)
	c.checkUsage(t, dra, inv)
	t.Logf("mode %s: upgrade from %s checked in %v", mode, prev.commit[:7], time.Since(start).Round(time.Second))
}

// checkSlice checks that a running pod's container main has its own slice of g: as many
// distinct GPUs as it asked in HAMI_GO_GPU_UUIDS (no CUDA_VISIBLE_DEVICES), its memory limit on
// each, its compute limit on each (CUDA_DEVICE_SM_LIMIT_<i>); in device-plugin mode its planned
// and claimed allocations agree and charge that (checkOwnLimit) and name those GPUs; in DRA mode
// its claims' allocations consume that on those GPUs. legacyOK (a pod created on the previous
// release) also accepts that release's env if it predates issue 36's contract (legacyEnv:
// CUDA_VISIBLE_DEVICES = HAMI_GO_GPU_UUIDS, one CUDA_DEVICE_SM_LIMIT). It returns the
// container's env.
func (c *Cluster) checkSlice(t testing.TB, p *corev1.Pod, g gpuLimits, dra, legacyOK bool) map[string]string {
	t.Helper()
	env := c.containerEnv(t, p.Namespace, p.Name, "main")
	legacy := legacyOK && legacyEnv(env)
	visible := strings.Split(env[envVisible], ",")
	distinct := map[string]bool{}
	for _, u := range visible {
		if u != "" {
			distinct[u] = true
		}
	}
	if len(distinct) != g.count || len(visible) != g.count {
		t.Errorf("pod %s/%s: %s=%q, want %d distinct GPUs", p.Namespace, p.Name, envVisible, env[envVisible], g.count)
	}
	if v := env[envCUDAVisible]; !legacy && v != "<unset>" {
		t.Errorf("pod %s/%s: %s=%q, want unset (the container sees only its own GPUs)", p.Namespace, p.Name, envCUDAVisible, v)
	}
	for i := 0; i < g.count; i++ {
		if k, want := fmt.Sprintf("CUDA_DEVICE_MEMORY_LIMIT_%d", i), fmt.Sprintf("%dm", g.memMiB); env[k] != want {
			t.Errorf("pod %s/%s: %s=%q, want %s", p.Namespace, p.Name, k, env[k], want)
		}
	}
	wantSM := ""
	if g.cores > 0 && g.cores < 100 {
		wantSM = fmt.Sprint(g.cores)
	}
	smKeys := []string{"CUDA_DEVICE_SM_LIMIT"}
	if legacy && env["CUDA_DEVICE_SM_LIMIT"] == "" && env[envSMLimitPrefix+"0"] != "" {
		// A restarted container of a claim the previous release prepared: the NRI plugin emptied
		// the claim's global limit and set the per-GPU ones.
		smKeys = nil
		for i := 0; i < g.count; i++ {
			smKeys = append(smKeys, fmt.Sprintf("%s%d", envSMLimitPrefix, i))
		}
	}
	if !legacy {
		// Every GPU of the pod asks the same compute, and no global limit is set.
		smKeys = nil
		for i := 0; i < g.count; i++ {
			smKeys = append(smKeys, fmt.Sprintf("%s%d", envSMLimitPrefix, i))
		}
		if v, ok := env["CUDA_DEVICE_SM_LIMIT"]; ok {
			t.Errorf("pod %s/%s: CUDA_DEVICE_SM_LIMIT=%q; hami-go sets the per-GPU limits only", p.Namespace, p.Name, v)
		}
	}
	for _, k := range smKeys {
		if got := env[k]; got != wantSM {
			t.Errorf("pod %s/%s: %s=%q, want %q (it asked %d %% of compute)", p.Namespace, p.Name, k, got, wantSM, g.cores)
		}
	}
	if !dra {
		got := c.ownLimit(t, p, g.memMiB, legacyOK)
		if !legacy && pciOrdered(got, c.busIDs(t)) != env[envVisible] || legacy && strings.Join(got, ",") != env[envVisible] {
			t.Errorf("pod %s/%s: claimed GPUs %v, the container sees %q", p.Namespace, p.Name, got, env[envVisible])
		}
		if _, claimed := allocations(t, p); claimed != nil {
			if ca := claimed.Container("main"); ca != nil {
				for _, d := range ca.Devices {
					if d.CoresPercent != g.cores {
						t.Errorf("pod %s/%s: claimed %d %% of %s's compute, want %d", p.Namespace, p.Name, d.CoresPercent, d.UUID, g.cores)
					}
				}
			}
		}
		return env
	}
	uuids := map[string]string{}
	for name, d := range c.draGPUs(t) {
		uuids[name] = d.uuid
	}
	var got []string
	for _, r := range c.podResults(t, p) {
		got = append(got, uuids[r.Device])
		mem, cores := r.ConsumedCapacity["memory"], r.ConsumedCapacity["cores"]
		if mem.Value()>>20 != g.memMiB || mem.Value()%(1<<20) != 0 || cores.Value() != int64(g.cores) {
			t.Errorf("pod %s/%s: its claim consumes memory %s cores %s of %s, want %d MiB and %d %%", p.Namespace, p.Name, mem.String(), cores.String(), r.Device, g.memMiB, g.cores)
		}
	}
	sort.Strings(got)
	sort.Strings(visible)
	if strings.Join(got, ",") != strings.Join(visible, ",") {
		t.Errorf("pod %s/%s: its claims are allocated GPUs %v, the container sees %v", p.Namespace, p.Name, got, visible)
	}
	return env
}

// podResults returns the device results of the allocations of all of p's claims (it fails the
// test when one is not allocated).
func (c *Cluster) podResults(t testing.TB, p *corev1.Pod) []resourcev1.DeviceRequestAllocationResult {
	t.Helper()
	var out []resourcev1.DeviceRequestAllocationResult
	for _, rc := range c.podClaimObjects(t, p) {
		if rc.Status.Allocation == nil {
			t.Fatalf("pod %s/%s: claim %s is not allocated", p.Namespace, p.Name, rc.Name)
		}
		out = append(out, rc.Status.Allocation.Devices.Results...)
	}
	if len(out) == 0 {
		t.Errorf("pod %s/%s: no allocated device (claim statuses %+v)", p.Namespace, p.Name, p.Status.ResourceClaimStatuses)
	}
	return out
}

// podClaimObjects returns p's ResourceClaims (from its status).
func (c *Cluster) podClaimObjects(t testing.TB, p *corev1.Pod) []resourcev1.ResourceClaim {
	t.Helper()
	var out []resourcev1.ResourceClaim
	for _, st := range p.Status.ResourceClaimStatuses {
		if st.ResourceClaimName == nil {
			continue
		}
		rc, err := c.Client.ResourceV1().ResourceClaims(p.Namespace).Get(context.Background(), *st.ResourceClaimName, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("pod %s/%s: claim %s: %v", p.Namespace, p.Name, *st.ResourceClaimName, err)
		}
		out = append(out, *rc)
	}
	return out
}

// claimRecords returns p's claims' allocations (as JSON, by claim name) and the claims' UIDs.
func (c *Cluster) claimRecords(t testing.TB, p *corev1.Pod) (map[string]string, []types.UID) {
	t.Helper()
	recs := map[string]string{}
	var uids []types.UID
	for _, rc := range c.podClaimObjects(t, p) {
		b, _ := json.Marshal(rc.Status.Allocation)
		recs[rc.Name] = string(b)
		uids = append(uids, rc.UID)
	}
	return recs, uids
}

// sliceEnv is what a container's env says of its slice, whichever release's contract wrote it:
// its GPUs and hami-go's own variables (HAMI_GO_*), its memory limits and cache file
// (CUDA_DEVICE_MEMORY_*), and its compute limit as "sm" (one CUDA_DEVICE_SM_LIMIT before issue
// 36, CUDA_DEVICE_SM_LIMIT_<i> per GPU since, each GPU of a pod asking the same). What only the
// contract or the node's runtime changed (CUDA_VISIBLE_DEVICES, CUDA_DEVICE_ORDER,
// LIBCUDA_LOG_LEVEL, NVIDIA_VISIBLE_DEVICES) is left out. A restarted container keeps its slice
// across the upgrade, in the new contract's words.
func sliceEnv(env map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range env {
		switch {
		case k == "CUDA_DEVICE_SM_LIMIT" || strings.HasPrefix(k, envSMLimitPrefix):
			// An emptied CUDA_DEVICE_SM_LIMIT (the NRI plugin empties the previous contract's
			// all-GPU value beside the per-GPU one) sets no limit: only a value counts, else
			// the map's random order made the result depend on which name came last.
			if v != "" {
				out["sm"] = v
			}
		case strings.HasPrefix(k, "HAMI_GO_") || strings.HasPrefix(k, "CUDA_DEVICE_MEMORY_"):
			out[k] = v
		}
	}
	return out
}

// sameEnv reports whether two string maps are equal.
func sameEnv(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func gpuUUIDs(inv device.Inventory) []string {
	out := make([]string, len(inv.GPUs))
	for i, g := range inv.GPUs {
		out[i] = g.UUID
	}
	return out
}

// gpuRoom is what one GPU has left: MiB and sharers.
type gpuRoom struct {
	id      string // the GPU's UUID (device-plugin mode) or device name (DRA mode)
	freeMiB int64
	sharers int64
}

// room returns, per GPU of the node, the memory and sharers left: device-plugin mode from the
// inventory and the pods' allocation records (nodeUsage), DRA mode from the ResourceSlice's
// capacities and every allocated claim's consumed capacity. It fails the test on a GPU holding
// more than it has.
func (c *Cluster) room(t testing.TB, dra bool, inv device.Inventory) []gpuRoom {
	t.Helper()
	var out []gpuRoom
	if !dra {
		use := c.nodeUsage(t)
		checkNotOvercommitted(t, inv, use)
		free := freeMiB(inv, use)
		for i, g := range inv.GPUs {
			r := gpuRoom{id: g.UUID, freeMiB: free[i], sharers: int64(inv.SplitCount)}
			if u := use[g.UUID]; u != nil {
				r.sharers -= int64(u.sharers)
			}
			out = append(out, r)
		}
		return out
	}
	ctx := context.Background()
	slices, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceSlices: %v", err)
	}
	byName := map[string]*gpuRoom{}
	for _, s := range slices.Items {
		if s.Spec.Driver != draClass || s.Spec.NodeName == nil || *s.Spec.NodeName != c.NodeName {
			continue
		}
		for _, d := range s.Spec.Devices {
			mem, sh := d.Capacity["memory"].Value, d.Capacity["sharers"].Value
			byName[d.Name] = &gpuRoom{id: d.Name, freeMiB: mem.Value() >> 20, sharers: sh.Value()}
		}
	}
	claims, err := c.Client.ResourceV1().ResourceClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list ResourceClaims: %v", err)
	}
	holders := map[string][]string{}
	for _, rc := range claims.Items {
		if rc.Status.Allocation == nil {
			continue
		}
		for _, r := range rc.Status.Allocation.Devices.Results {
			g := byName[r.Device]
			if r.Driver != draClass || g == nil {
				continue
			}
			mem := r.ConsumedCapacity["memory"]
			g.freeMiB -= (mem.Value() + 1<<20 - 1) >> 20
			sharers := int64(1)
			if q, ok := r.ConsumedCapacity["sharers"]; ok {
				sharers = q.Value()
			}
			g.sharers -= sharers
			holders[r.Device] = append(holders[r.Device], rc.Namespace+"/"+rc.Name)
		}
	}
	for _, g := range byName {
		if g.freeMiB < 0 || g.sharers < 0 {
			t.Errorf("device %s is over-committed: %d MiB and %d sharers left, held by %v", g.id, g.freeMiB, g.sharers, holders[g.id])
		}
		out = append(out, *g)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].id < out[j].id })
	return out
}

// checkUsage fails the test when a GPU of the node is over-committed (room).
func (c *Cluster) checkUsage(t testing.TB, dra bool, inv device.Inventory) {
	t.Helper()
	c.room(t, dra, inv)
}

// fillNode creates, one after another and largest first, a one-GPU pod of exactly the MiB each
// GPU with a sharer left still has, and waits for each to run: the scheduler can place each only
// on the GPU it was made for, so afterwards no GPU has both memory and a sharer left (which it
// checks).
func (c *Cluster) fillNode(t *testing.T, ns string, dra bool, inv device.Inventory) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	rooms := c.room(t, dra, inv)
	sort.Slice(rooms, func(i, j int) bool { return rooms[i].freeMiB > rooms[j].freeMiB })
	n := 0
	for _, r := range rooms {
		if r.freeMiB <= 0 || r.sharers <= 0 {
			continue
		}
		name := fmt.Sprintf("fill-%d", n)
		n++
		c.CreatePod(t, gpuPod(ns, name, gpuLimits{count: 1, memMiB: r.freeMiB}))
		pods = append(pods, *c.WaitForRunning(t, ns, name, upgradeWait))
	}
	for _, r := range c.room(t, dra, inv) {
		if r.freeMiB > 0 && r.sharers > 0 {
			t.Fatalf("after %d fill pods GPU %s still has %d MiB and %d sharers left", n, r.id, r.freeMiB, r.sharers)
		}
	}
	t.Logf("filled the node with %d pods, one per GPU with room left", n)
	return pods
}

// createRetrying creates p, retrying while the API server cannot call the webhook (its pod is
// replaced during the upgrade: GPU pods are refused then, case C38, and a controller would retry
// as this does). It returns how many times the creation was refused.
func (c *Cluster) createRetrying(p *corev1.Pod, timeout time.Duration) (int, error) {
	refused := 0
	deadline := time.Now().Add(timeout)
	for {
		_, err := c.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{})
		if err == nil || apierrors.IsAlreadyExists(err) {
			return refused, nil
		}
		if !strings.Contains(err.Error(), "failed calling webhook") && !apierrors.IsInternalError(err) && !apierrors.IsServiceUnavailable(err) && !apierrors.IsTimeout(err) {
			return refused, fmt.Errorf("create pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		refused++
		if time.Now().After(deadline) {
			return refused, fmt.Errorf("create pod %s/%s: still refused after %v: %w", p.Namespace, p.Name, timeout, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// waitSomeBound waits until at least n pods of ns are bound to a node.
func (c *Cluster) waitSomeBound(t testing.TB, ns string, n int, timeout time.Duration) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		bound := 0
		for _, p := range l.Items {
			if p.Spec.NodeName != "" {
				bound++
			}
		}
		return bound >= n, nil
	})
	if err != nil {
		t.Fatalf("fewer than %d pods of %s bound after %v", n, ns, timeout)
	}
}

// nodeGaps is what watchNodeRecords saw of the node's records during the upgrade.
type nodeGaps struct {
	mu        sync.Mutex
	polls     int
	missing   []string // device-plugin mode: moments without a decodable inventory annotation or Lease
	minDevs   int      // DRA mode: the fewest devices the node's ResourceSlices listed
	maxGapDRA time.Duration
	openGap   bool // DRA mode: none listed when the watch ended
}

// watchNodeRecords polls the node's published records every 250 ms until ctx ends: device-plugin
// mode the inventory annotation (decoded) and the agent's Lease, DRA mode the devices of the
// node's ResourceSlices.
func (c *Cluster) watchNodeRecords(ctx context.Context, dra bool, g *nodeGaps) {
	g.minDevs = -1
	var gapStart time.Time
	for ctx.Err() == nil {
		var miss string
		devs := 0
		ok := true // the API answered: a poll it did not answer says nothing
		if dra {
			l, err := c.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
			ok = err == nil
			if ok {
				for _, s := range l.Items {
					if s.Spec.Driver == draClass && s.Spec.NodeName != nil && *s.Spec.NodeName == c.NodeName {
						devs += len(s.Spec.Devices)
					}
				}
			}
		} else {
			n, err := c.Client.CoreV1().Nodes().Get(ctx, c.NodeName, metav1.GetOptions{})
			ok = err == nil
			if ok {
				if s, found := n.Annotations[device.AnnoInventory]; !found {
					miss = "no inventory annotation"
				} else if _, err := device.DecodeInventory(s); err != nil {
					miss = "inventory annotation: " + err.Error()
				}
			}
			if _, err := c.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, device.LeasePrefix+c.NodeName, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				miss += "; no Lease " + device.LeasePrefix + c.NodeName
			}
		}
		if !ok {
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
			continue
		}
		g.mu.Lock()
		g.polls++
		if miss != "" {
			g.missing = append(g.missing, time.Now().Format("15:04:05.000")+" "+miss)
		}
		if dra && (g.minDevs < 0 || devs < g.minDevs) {
			g.minDevs = devs
		}
		if dra && devs == 0 && gapStart.IsZero() {
			gapStart = time.Now()
		} else if dra && devs > 0 && !gapStart.IsZero() {
			if d := time.Since(gapStart); d > g.maxGapDRA {
				g.maxGapDRA = d
			}
			gapStart = time.Time{}
		}
		g.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !gapStart.IsZero() {
		g.maxGapDRA = max(g.maxGapDRA, time.Since(gapStart))
		g.openGap = true
	}
}

// report fails the test when, in device-plugin mode, the node's inventory or Lease went missing
// during the upgrade (the old agent withdrew them: the DaemonSet's update is a restart); in DRA
// mode it logs the fewest devices seen (the kubelet may drop a restarting driver's slices).
func (g *nodeGaps) report(t testing.TB, dra bool) {
	t.Helper()
	g.mu.Lock()
	defer g.mu.Unlock()
	if dra {
		t.Logf("during the upgrade (%d polls) the node's ResourceSlices listed at least %d devices (longest time with none: %v, still none at the end: %v)", g.polls, g.minDevs, g.maxGapDRA.Round(time.Millisecond), g.openGap)
		return
	}
	if len(g.missing) > 0 {
		t.Errorf("during the upgrade the node's records went missing %d of %d polls (a restart must keep them): %v", len(g.missing), g.polls, g.missing)
	} else {
		t.Logf("the node's inventory annotation and Lease were there at each of %d polls during the upgrade", g.polls)
	}
}

// readDRACheckpoint returns the claim UIDs in the DRA driver's checkpoint on the node.
func readDRACheckpoint(t testing.TB) map[types.UID]bool {
	t.Helper()
	b, err := os.ReadFile(draCheckpoint)
	if err != nil {
		t.Fatalf("the DRA driver's checkpoint: %v", err)
	}
	var f struct {
		Claims map[types.UID]json.RawMessage `json:"claims"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatalf("the DRA driver's checkpoint %s: %v", draCheckpoint, err)
	}
	out := map[types.UID]bool{}
	for uid := range f.Claims {
		out[uid] = true
	}
	return out
}

// dumpUpgradeLogs logs, when the test failed, the last lines of the chart's pods' logs.
func (c *Cluster) dumpUpgradeLogs(t *testing.T) {
	if !t.Failed() {
		return
	}
	l, err := c.Client.CoreV1().Pods(chartNamespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return
	}
	tail := int64(40)
	for _, p := range l.Items {
		for _, ctr := range p.Spec.Containers {
			b, err := c.Client.CoreV1().Pods(chartNamespace).GetLogs(p.Name, &corev1.PodLogOptions{Container: ctr.Name, TailLines: &tail}).Do(context.Background()).Raw()
			if err == nil {
				t.Logf("--- %s[%s] (last %d lines):\n%s", p.Name, ctr.Name, tail, b)
			}
		}
	}
}

// burst creates one-slice pods (upgradeBurstMiB) named <prefix>-<i> in a namespace, one every
// interval, at least upgradeBurstMin and until during is false after having been true
// (or upgradeBurstMax), through the webhook's outage (createRetrying).
type burst struct {
	during atomic.Bool // set while the event the burst is in flight for goes on
	done   chan burstResult
}

// burstResult is what a burst did.
type burstResult struct {
	created, whileDuring, refused int
	err                           error
}

func (c *Cluster) startBurst(ns, prefix string, every time.Duration) *burst {
	b := &burst{done: make(chan burstResult, 1)}
	go func() {
		var r burstResult
		seen := false
		for i := 0; i < upgradeBurstMax; i++ {
			during := b.during.Load()
			seen = seen || during
			if seen && !during && i >= upgradeBurstMin {
				break
			}
			if during {
				r.whileDuring++
			}
			n, err := c.createRetrying(gpuPod(ns, fmt.Sprintf("%s-%02d", prefix, i), gpuLimits{count: 1, memMiB: upgradeBurstMiB}), 3*time.Minute)
			r.refused += n
			if err != nil {
				r.err = err
				break
			}
			r.created++
			time.Sleep(every)
		}
		b.done <- r
	}()
	return b
}

// wait returns the burst's result once it ended; an error fails the test.
func (b *burst) wait(t testing.TB) burstResult {
	t.Helper()
	r := <-b.done
	if r.err != nil {
		t.Fatalf("the burst: %v", r.err)
	}
	return r
}

// handsOver reports whether the previous release's device plugin hands over when it stops (it
// releases the node's Lease first: pkg/deviceplugin handOver, case C45), read from its source.
func handsOver(t testing.TB, prev previousRelease) bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(prev.chart, "..", "..", "pkg", "deviceplugin", "run.go"))
	if err != nil {
		t.Fatalf("the previous release's source: %v", err)
	}
	return strings.Contains(string(b), "func (p *Plugin) handOver(")
}

// admissionFailed reports whether the kubelet failed p at admission because its device plugin
// was away ("no healthy devices present"): the failure a node agent's hand-over prevents.
func admissionFailed(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodFailed && p.Status.Reason == "UnexpectedAdmissionError" && strings.Contains(p.Status.Message, "no healthy devices")
}

// waitBurstRunning waits until the n pods of ns all run (every container started) and returns
// them. A pod the kubelet failed at admission for want of its device plugin (admissionFailed) is
// created again when recreate is true (counted and logged), and fails the test otherwise; any
// other failed pod fails the test.
func (c *Cluster) waitBurstRunning(t testing.TB, ns string, n int, recreate bool) []corev1.Pod {
	t.Helper()
	ctx := context.Background()
	var pods []corev1.Pod
	var again []string
	var notRunning []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 2*upgradeWait, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		pods, notRunning = l.Items, nil
		for i := range pods {
			p := &pods[i]
			switch {
			case admissionFailed(p) && recreate:
				again = append(again, p.Name)
				t.Logf("pod %s/%s failed at admission (%s): the previous release's agent stopped without handing over; created again", ns, p.Name, p.Status.Message)
				c.deleteNow(t, ns, p.Name)
				fresh := gpuPod(ns, p.Name, gpuLimits{count: 1, memMiB: upgradeBurstMiB})
				if _, err := c.createRetrying(fresh, time.Minute); err != nil {
					t.Fatalf("create %s again: %v", p.Name, err)
				}
				return false, nil
			case p.Status.Phase == corev1.PodFailed:
				t.Fatalf("pod %s/%s failed:\n%s", ns, p.Name, c.describe(ns, p.Name, p))
			case !allStarted(p):
				notRunning = append(notRunning, p.Name+"("+string(p.Status.Phase)+")")
			}
		}
		return len(pods) == n && len(notRunning) == 0, nil
	})
	if err != nil {
		sort.Strings(notRunning)
		t.Fatalf("%d of %d pods in %s not Running after %v: %v", len(notRunning), n, ns, 2*upgradeWait, notRunning)
	}
	if len(again) > 0 {
		t.Logf("%d pods of %s were failed at admission while the previous release's device plugin was away, and created again: %v", len(again), ns, again)
	}
	return pods
}

// agentRoll is a rollout of the node agent's DaemonSet.
type agentRoll struct {
	name string
	took time.Duration
}

// restartAgent rolls the node agent's DaemonSet (device-plugin or dra-driver) as a helm upgrade
// that changes its pod template does (kubectl rollout restart: a pod template annotation), and
// waits until the new agent pod runs and, in device-plugin mode, holds the node's Lease again.
func (c *Cluster) restartAgent(t testing.TB, dra bool, timeout time.Duration) agentRoll {
	t.Helper()
	ctx := context.Background()
	comp := "device-plugin"
	if dra {
		comp = "dra-driver"
	}
	l, err := c.Client.AppsV1().DaemonSets(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
	if err != nil || len(l.Items) != 1 {
		t.Fatalf("the %s DaemonSet in %s: %v (%d found)", comp, chartNamespace, err, len(l.Items))
	}
	ds := l.Items[0]
	old, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
	if err != nil {
		t.Fatal(err)
	}
	oldUIDs := map[types.UID]bool{}
	for _, p := range old.Items {
		oldUIDs[p.UID] = true
	}
	start := time.Now()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, start.Format(time.RFC3339Nano))
	if _, err := c.Client.AppsV1().DaemonSets(chartNamespace).Patch(ctx, ds.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatalf("roll DaemonSet %s: %v", ds.Name, err)
	}
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		l, err := c.Client.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{LabelSelector: labelComponent + "=" + comp})
		if err != nil {
			return false, nil
		}
		fresh := false
		for i := range l.Items {
			p := &l.Items[i]
			if oldUIDs[p.UID] {
				return false, nil // the old agent still there
			}
			fresh = fresh || (allStarted(p) && p.DeletionTimestamp == nil)
		}
		if !fresh {
			return false, nil
		}
		if dra {
			return true, nil
		}
		lease, err := c.Client.CoordinationV1().Leases("kube-node-lease").Get(ctx, device.LeasePrefix+c.NodeName, metav1.GetOptions{})
		return err == nil && !device.LeaseReleased(lease), nil
	})
	if err != nil {
		t.Fatalf("DaemonSet %s did not roll within %v (a new agent running and, in device-plugin mode, holding the node's Lease)", ds.Name, timeout)
	}
	return agentRoll{name: ds.Name, took: time.Since(start)}
}

// releasedRefusals counts the pods of ns with a FailedScheduling event naming a released Lease
// (the extender's refusal while the node's device plugin hands over).
func (c *Cluster) releasedRefusals(t testing.TB, ns string) int {
	t.Helper()
	evs, err := c.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=FailedScheduling"})
	if err != nil {
		t.Fatalf("events of %s: %v", ns, err)
	}
	pods := map[string]bool{}
	for _, e := range evs.Items {
		if strings.Contains(e.Message, "released: starting or restarting") {
			pods[e.InvolvedObject.Name] = true
		}
	}
	return len(pods)
}

package nodeagent

import (
	"fmt"
	"math/rand"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// switchModel is one node switched between the two modes at random while one-GPU pods of
// random sizes come and go (unit tests only). Each mode's scheduler sees only its own mode's
// charges, as in a cluster (the extender charges plans, DRA's allocator claims), and places a
// pod only while its mode's agent serves the node. The agents follow the mode switch's rules
// with the real holder lists: the leaving agent serves its pods until none is left (Drain), the
// arriving one serves once DevicePluginHolders / DRAHolders (over the pods and claims as the API
// would list them) is empty. The invariant: no GPU is charged beyond its memory by the two
// modes' pods together.
type switchModel struct {
	capMiB  int64
	gpus    int
	mode    string          // the node's label: "deviceplugin" or "dra"
	serving map[string]bool // agent (mode) -> serves the node's GPUs
	present map[string]bool // agent (mode) -> its pod is on the node (serving or draining)
	pods    map[string]*modelPod
	seq     int
	// noWait, a negative control, lets the arriving agent serve at once.
	noWait bool
}

type modelPod struct {
	name, mode string
	gpu        int
	mib        int64
}

func (m *switchModel) used(gpu int, mode string) int64 {
	var u int64
	for _, p := range m.pods {
		if p.gpu == gpu && (mode == "" || p.mode == mode) {
			u += p.mib
		}
	}
	return u
}

// create: a pod of the label's mode, placed first-fit by that mode's scheduler on what it
// sees, or left pending (not modelled further) when the mode's agent does not serve.
func (m *switchModel) create(r *rand.Rand) {
	if !m.serving[m.mode] {
		return
	}
	mib := int64(1+r.Intn(4)) * m.capMiB / 4
	for g := 0; g < m.gpus; g++ {
		if m.used(g, m.mode)+mib <= m.capMiB {
			m.seq++
			n := fmt.Sprintf("p%d", m.seq)
			m.pods[n] = &modelPod{name: n, mode: m.mode, gpu: g, mib: mib}
			return
		}
	}
}

// apiObjects are the node's pods (with their plan annotation or claim) and claims, as the
// API server lists them, and the agents' own pods.
func (m *switchModel) apiObjects() ([]corev1.Pod, map[string]*resourceapi.ResourceClaim) {
	var pods []corev1.Pod
	claims := map[string]*resourceapi.ResourceClaim{}
	for _, n := range m.names() {
		p := m.pods[n]
		pod := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: n, Annotations: map[string]string{}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		if p.mode == "deviceplugin" {
			pod.Annotations[device.AnnoPlanned] = "planned"
		} else {
			cn := n + "-gpu"
			pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &cn}}
			claims["ml/"+cn] = &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: cn}, Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
				Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{Driver: draapi.DriverName, Pool: "n1"}}}}}}
		}
		pods = append(pods, pod)
	}
	for _, mode := range []string{"deviceplugin", "dra"} {
		if m.present[mode] {
			comp := ComponentDevicePlugin
			if mode == "dra" {
				comp = ComponentDRADriver
			}
			pods = append(pods, corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "hami-go-system", Name: comp,
				Labels: map[string]string{labelComponent: comp, labelName: "hami-go"}}, Spec: corev1.PodSpec{NodeName: "n1"}})
		}
	}
	return pods, claims
}

func (m *switchModel) names() []string {
	var out []string
	for n := range m.pods {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// tick: the leaving agent leaves once none of its pods is left (Drain); the arriving agent
// serves once the other mode holds nothing and its agent is gone (WaitOldModeGone).
func (m *switchModel) tick() {
	other := otherModelMode(m.mode)
	if m.present[other] {
		held := false
		for _, p := range m.pods {
			held = held || p.mode == other
		}
		if !held {
			m.present[other], m.serving[other] = false, false
		}
	}
	if m.serving[m.mode] {
		return
	}
	m.present[m.mode] = true
	pods, claims := m.apiObjects()
	var holders []string
	if m.mode == "dra" {
		holders = DevicePluginHolders("n1", AgentPods{Namespace: "hami-go-system", Chart: "hami-go"}, pods)
	} else {
		var all []*resourceapi.ResourceClaim
		for _, c := range claims {
			all = append(all, c)
		}
		holders = DRAHolders("n1", AgentPods{Namespace: "hami-go-system", Chart: "hami-go"}, pods, func(ns, n string) *resourceapi.ResourceClaim { return claims[ns+"/"+n] }, all)
	}
	if len(holders) == 0 || m.noWait {
		m.serving[m.mode] = true
	}
}

// switchMode relabels the node: the agent of the old mode stops serving new pods (Lease
// released, no devices published) and drains.
func (m *switchModel) switchMode() {
	old := m.mode
	m.mode = otherModelMode(old)
	m.serving[old] = false
}

// otherModelMode is the mode a node of mode switches to: "deviceplugin" ↔ "dra".
func otherModelMode(mode string) string {
	if mode == "dra" {
		return "deviceplugin"
	}
	return "dra"
}

// overCommitted names the GPUs the two modes' pods together charge beyond their memory.
func (m *switchModel) overCommitted() []string {
	var out []string
	for g := 0; g < m.gpus; g++ {
		if u := m.used(g, ""); u > m.capMiB {
			out = append(out, fmt.Sprintf("GPU %d: %d MiB of %d (device plugin %d, DRA %d)", g, u, m.capMiB, m.used(g, "deviceplugin"), m.used(g, "dra")))
		}
	}
	return out
}

func runSwitchModel(seed int64, noWait bool, steps int) (switches int, bad []string) {
	r := rand.New(rand.NewSource(seed))
	m := &switchModel{capMiB: 40000, gpus: 2, mode: "deviceplugin", noWait: noWait,
		serving: map[string]bool{"deviceplugin": true}, present: map[string]bool{"deviceplugin": true}, pods: map[string]*modelPod{}}
	for i := 0; i < steps; i++ {
		switch x := r.Intn(20); {
		case x < 9:
			m.create(r)
		case x < 16:
			if names := m.names(); len(names) > 0 {
				delete(m.pods, names[r.Intn(len(names))])
			}
		case x < 17:
			m.switchMode()
			switches++
		default:
			m.tick()
		}
		if b := m.overCommitted(); len(b) > 0 {
			return switches, append(b, fmt.Sprintf("step %d, seed %d", i, seed))
		}
		if m.serving["deviceplugin"] && m.serving["dra"] && !noWait {
			return switches, []string{fmt.Sprintf("both agents serve the node at step %d, seed %d", i, seed)}
		}
	}
	return switches, nil
}

// case C45, issue 28 (the model test's mode switch): random switches in both directions under random
// pod creation and deletion never over-commit a GPU, and never have both agents serve; the
// same model with the arriving agent serving at once (noWait) over-commits, so the model can
// fail.
func TestModeSwitchModelNeverOvercommits(t *testing.T) {
	total := 0
	for seed := int64(1); seed <= 300; seed++ {
		n, bad := runSwitchModel(seed, false, 400)
		total += n
		if len(bad) > 0 {
			t.Fatalf("over-commit or double service: %v", bad)
		}
	}
	if total < 1000 {
		t.Fatalf("only %d switches in 300 runs: the model does not exercise the switch", total)
	}
	failed := 0
	for seed := int64(1); seed <= 300; seed++ {
		if _, bad := runSwitchModel(seed, true, 400); len(bad) > 0 {
			failed++
		}
	}
	if failed == 0 {
		t.Fatal("without the arriving agent's wait no run over-commits: the model cannot tell the rule matters")
	}
	t.Logf("%d switches without an over-commit; without the wait %d of 300 runs over-commit", total, failed)
}

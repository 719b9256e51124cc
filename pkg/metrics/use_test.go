package metrics

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hami-go/hami-go/pkg/device"
)

// ProcCgroupResolver finds the container ID in /proc/<pid>/cgroup as cgroup v1 (containerd's
// cgroupfs driver: /k8s.io/<id>) and cgroup v2 under systemd show it, also as a reader in
// another cgroup namespace sees it (the path relative to its own root, with ".."), the last
// ID where a path names two (a nested runtime's container in a pod's).
func TestProcCgroupResolver(t *testing.T) {
	root := t.TempDir()
	a, b := strings.Repeat("a", 64), strings.Repeat("b", 64)
	files := map[string]string{
		"100": "9:name=systemd:/k8s.io/" + a + "\n0::/k8s.io/" + a + "\n",
		"101": "0::/../../kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod1.slice/cri-containerd-" + b + ".scope\n",
		"102": "0::/kubepods/pod1/" + a + "/" + b + "\n",
		"103": "0::/user.slice/session-1.scope\n",
	}
	for pid, s := range files {
		if err := os.MkdirAll(filepath.Join(root, pid), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, pid, "cgroup"), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := ProcCgroupResolver(root)
	for _, tt := range []struct {
		pid  uint32
		want string
		ok   bool
	}{{100, a, true}, {101, b, true}, {102, b, true}, {103, "", false}, {104, "", false}} {
		if got, ok := r(tt.pid); got != tt.want || ok != tt.ok {
			t.Errorf("pid %d: %q, %v; want %q, %v", tt.pid, got, ok, tt.want, tt.ok)
		}
	}
}

type lister map[string][]device.ProcessMemory

func (l lister) Processes(uuid string) ([]device.ProcessMemory, error) {
	p, ok := l[uuid]
	if !ok {
		return nil, errors.New("gpu is lost")
	}
	return p, nil
}

// AttributeUse sums a GPU's processes into its used memory and each known container's into its
// owner's key; processes of unknown containers (or without a resolver) count only for the GPU;
// a GPU whose processes cannot be listed has no known use.
func TestAttributeUse(t *testing.T) {
	l := lister{"GPU-0": {{PID: 1, UsedMiB: 100}, {PID: 2, UsedMiB: 200}, {PID: 3, UsedMiB: 400}, {PID: 4, UsedMiB: 800}}}
	ids := map[uint32]string{1: "c1", 2: "c2", 3: "c3"}
	resolve := func(pid uint32) (string, bool) { id, ok := ids[pid]; return id, ok }
	owners := map[string]string{"c1": "slice-x", "c2": "slice-x", "c3": "slice-y"}
	owner := func(id string) (string, bool) { o, ok := owners[id]; delete(owners, "c3"); return o, ok }
	use := map[string]int64{}
	g := GPUSample{UUID: "GPU-0"}
	if !AttributeUse(l, &g, resolve, owner, use) || !g.UsedKnown || g.UsedMiB != 1500 {
		t.Fatalf("GPU sample %+v, want 1500 MiB known", g)
	}
	if use["slice-x"] != 300 || use["slice-y"] != 0 || len(use) != 1 {
		t.Errorf("use %v, want slice-x 300 only (c3 forgotten before its process)", use)
	}
	g = GPUSample{UUID: "GPU-0"}
	use = map[string]int64{}
	if !AttributeUse(l, &g, nil, owner, use) || g.UsedMiB != 1500 || len(use) != 0 {
		t.Errorf("without a resolver: GPU %+v, use %v; want 1500 MiB and no slice use", g, use)
	}
	g = GPUSample{UUID: "GPU-1"}
	if AttributeUse(l, &g, resolve, owner, use) || g.UsedKnown {
		t.Errorf("lost GPU: %+v, want unknown use", g)
	}
}

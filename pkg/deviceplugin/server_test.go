package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"github.com/hami-go/hami-go/pkg/device"
)

func startServe(t *testing.T, p *Plugin) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { _ = p.Serve(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestRegistrationAndListAndWatch(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	cfg := testConfig(dir)
	cfg.SplitCount = 4
	p, _ := newTestPlugin(t, cfg, newTestBackend(2, 81559))
	startServe(t, p)

	r := k.waitRegistration(t, 5*time.Second)
	if r.Version != "v1beta1" || r.Endpoint != SocketName || r.ResourceName != "nvidia.com/gpu" || r.Options.GetPreferredAllocationAvailable || !r.Options.GetPreStartRequired() {
		t.Fatalf("registration = %v", r)
	}
	c := k.client(t, r.Endpoint)
	opts, err := c.GetDevicePluginOptions(context.Background(), &pluginapi.Empty{})
	if err != nil || opts.GetPreferredAllocationAvailable || !opts.PreStartRequired {
		t.Fatalf("options = %v, %v", opts, err)
	}
	s, err := c.ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	lw, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if len(lw.Devices) != 8 {
		t.Fatalf("got %d devices, want 2 GPUs x 4 = 8", len(lw.Devices))
	}
	d := lw.Devices[5] // GPU-B slice 1
	if d.ID != "GPU-B::1" || d.Health != pluginapi.Healthy || len(d.Topology.Nodes) != 1 || d.Topology.Nodes[0].ID != 1 {
		t.Fatalf("device 5 = %v", d)
	}
}

func TestReRegistration(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	p, _ := newTestPlugin(t, testConfig(dir), newTestBackend(1, 81559))
	startServe(t, p)
	k.waitRegistration(t, 5*time.Second)
	waitFor(t, "first registration answered", func() bool { return p.Registrations() == 1 })

	// Kubelet restart: kubelet.sock re-created and plugin sockets wiped.
	k.srv.Stop()
	_ = os.Remove(filepath.Join(dir, KubeletSocketName))
	_ = os.Remove(filepath.Join(dir, SocketName))
	k2 := startFakeKubelet(t, dir)
	r := k2.waitRegistration(t, 3*time.Second)
	if r.ResourceName != "nvidia.com/gpu" {
		t.Fatalf("re-registration = %v", r)
	}
	// The plugin serves again on a fresh socket.
	if _, err := k2.client(t, SocketName).GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		t.Fatalf("plugin socket after re-registration: %v", err)
	}

	// Own socket deleted (kubelet.sock unchanged): serve again and register again.
	_ = os.Remove(filepath.Join(dir, SocketName))
	k2.waitRegistration(t, 3*time.Second)
	if _, err := os.Stat(filepath.Join(dir, SocketName)); err != nil {
		t.Fatalf("socket not re-created: %v", err)
	}
	waitFor(t, "3 registrations", func() bool { return p.Registrations() == 3 })
}

// case C23: application XIDs change nothing; XID 79 marks the GPU (all slices) unhealthy and
// ListAndWatch sends it; after the recovery probes the GPU is healthy again.
func TestListAndWatchHealthC23(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	cfg := testConfig(dir)
	cfg.SplitCount = 3
	b := newTestBackend(2, 81559)
	p, clk := newTestPlugin(t, cfg, b)
	startServe(t, p)
	k.waitRegistration(t, 5*time.Second)
	s, err := k.client(t, SocketName).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(); err != nil {
		t.Fatal(err)
	}
	count := func(lw *pluginapi.ListAndWatchResponse) (healthy int, unhealthyA int) {
		for _, d := range lw.Devices {
			if d.Health == pluginapi.Healthy {
				healthy++
			} else if d.ID[:5] == "GPU-A" {
				unhealthyA++
			}
		}
		return
	}
	for _, x := range []uint64{13, 31, 43, 45, 68, 109} {
		p.OnXID(device.XIDEvent{UUID: "GPU-A", XID: x, Time: clk.Now()})
	}
	if u := p.Health().Unhealthy(); len(u) != 0 {
		t.Fatalf("application XIDs made %v unhealthy", u)
	}
	start := time.Now()
	p.OnXID(device.XIDEvent{UUID: "GPU-A", XID: 79, Time: clk.Now()})
	lw, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("ListAndWatch update after %s, want within 1s", el)
	}
	if h, ua := count(lw); h != 3 || ua != 3 {
		t.Fatalf("after XID 79: %d healthy, %d unhealthy slices of GPU-A; want 3 and 3", h, ua)
	}
	if inv := p.Inventory(); inv.GPUs[0].Healthy || !inv.GPUs[1].Healthy {
		t.Fatalf("inventory health = %v %v", inv.GPUs[0].Healthy, inv.GPUs[1].Healthy)
	}
	// Recovery: probes fail, then 3 consecutive successes.
	b.mu.Lock()
	b.probeErr["GPU-A"] = os.ErrDeadlineExceeded
	b.mu.Unlock()
	p.ProbeUnhealthy()
	p.ProbeUnhealthy()
	b.mu.Lock()
	delete(b.probeErr, "GPU-A")
	b.mu.Unlock()
	p.ProbeUnhealthy()
	p.ProbeUnhealthy()
	if p.Health().Healthy("GPU-A") {
		t.Fatal("GPU-A healthy after 2 successful probes, want 3")
	}
	p.ProbeUnhealthy()
	lw, err = s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	if h, _ := count(lw); h != 6 {
		t.Fatalf("after recovery %d healthy slices, want 6", h)
	}
}

package daemon

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// start serves profile on a socket in a temp dir until the test ends.
func start(t *testing.T, profile string) string {
	t.Helper()
	devs, err := Devices("node-a", profile)
	if err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(t.TempDir(), "s")
	ln, err := Listen(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- New(Config{Devices: devs}).Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

func dial(t *testing.T, sock string) *Client {
	t.Helper()
	c, err := Dial(sock, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func must(t *testing.T, c *Client, req string) string {
	t.Helper()
	ans, err := c.Request(req)
	if err != nil {
		t.Fatalf("%s: %v", req, err)
	}
	return ans
}

func code(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return "not an *Error: " + strings.TrimSpace(err.Error())
}

func TestDevicesFollowTheFakeProfile(t *testing.T) {
	devs, err := Devices("node-a", "dgxh100")
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 || devs[0].Name != "NVIDIA H100 80GB HBM3" || devs[0].TotalBytes != 81920<<20 ||
		devs[0].Minor != 7 || devs[7].Minor != 0 || devs[3].NUMA != 0 || devs[4].NUMA != 1 ||
		devs[1].PCIBusID != "00000000:02:00.0" || devs[0].SMs != 132 || devs[0].PCIDeviceID == 0 ||
		devs[0].NVLinks != 18 {
		t.Fatalf("devices: %+v", devs)
	}
	sock := start(t, "dgxh100")
	got, err := dial(t, sock).Devices()
	if err != nil {
		t.Fatal(err)
	}
	for i := range devs {
		if got[i] != devs[i] {
			t.Errorf("DEV %d = %+v, want %+v", i, got[i], devs[i])
		}
	}
}

func TestMemoryAccountingAndRelease(t *testing.T) {
	sock := start(t, "1x1024:NVIDIA A10")
	a, b := dial(t, sock), dial(t, sock)
	h1 := must(t, a, "ALLOC 0 1000")
	h2 := must(t, a, "ALLOC 0 "+strconv.Itoa(3<<20))
	n1, _ := strconv.ParseUint(h1, 10, 64)
	n2, _ := strconv.ParseUint(h2, 10, 64)
	if n1 != HandleBase || n2 != HandleBase+HandleAlign {
		t.Errorf("handles %#x %#x, want %#x and +2 MiB", n1, n2, HandleBase)
	}
	if got := must(t, a, "MEM 0"); got != strconv.Itoa(1024<<20)+" "+strconv.Itoa(1000+3<<20) {
		t.Errorf("MEM = %q", got)
	}
	if _, err := b.Request("ALLOC 0 " + strconv.Itoa(1024<<20)); code(err) != "OOM" {
		t.Errorf("over-allocation: %v, want OOM", err)
	}
	for _, req := range []string{"ALLOC 0 0", "ALLOC 1 5", "DEV 1", "MEM -1", "NOPE", "XID 9 79", "RECOVER 1", "TOPO 1", "TOPO"} {
		if _, err := b.Request(req); code(err) != "INVALID" {
			t.Errorf("%s: %v, want INVALID", req, err)
		}
	}
	if _, err := b.Request("FREE " + h1); code(err) != "NOT_FOUND" {
		t.Errorf("freeing another connection's memory: %v, want NOT_FOUND", err)
	}
	if got := must(t, a, "FREE "+h1); got != "1000" {
		t.Errorf("FREE = %q", got)
	}
	if _, err := a.Request("FREE " + h1); code(err) != "NOT_FOUND" {
		t.Errorf("double free: %v, want NOT_FOUND", err)
	}
	must(t, b, "ALLOC 0 5")
	if got := must(t, b, "PROCS 0"); !strings.HasPrefix(got, "1 ") || !strings.HasSuffix(got, ":"+strconv.Itoa(3<<20+5)) {
		t.Errorf("PROCS = %q, want this pid once with both connections' bytes", got)
	}
	_ = a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for must(t, b, "MEM 0") != strconv.Itoa(1024<<20)+" 5" {
		if time.Now().After(deadline) {
			t.Fatalf("closed connection's memory not freed: MEM = %q", must(t, b, "MEM 0"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A process is in a device's PROCS list from its first context there, with 0 bytes until it
// allocates, and leaves it when its last context there ends or its connection closes: HAMi-core
// finds its own host PID as the one new in the list after cuDevicePrimaryCtxRetain (case C62).
func TestContextsListTheProcess(t *testing.T) {
	sock := start(t, "dgxa100")
	a, b := dial(t, sock), dial(t, sock)
	pid := strconv.Itoa(os.Getpid())
	if got := must(t, b, "PROCS 2"); got != "0" {
		t.Errorf("PROCS before any context = %q, want 0", got)
	}
	for i, want := range []string{"1", "2"} {
		if got := must(t, a, "CTX 2"); got != want {
			t.Errorf("CTX #%d = %q, want %q", i+1, got, want)
		}
	}
	if got := must(t, b, "PROCS 2"); got != "1 "+pid+":0" {
		t.Errorf("PROCS with two contexts and no memory = %q, want %q", got, "1 "+pid+":0")
	}
	if got := must(t, b, "PROCS 3"); got != "0" {
		t.Errorf("PROCS of another device = %q, want 0", got)
	}
	must(t, a, "ALLOC 2 4096")
	if got := must(t, b, "PROCS 2"); got != "1 "+pid+":4096" {
		t.Errorf("PROCS with memory = %q, want %q (listed once)", got, "1 "+pid+":4096")
	}
	must(t, a, "CTXEND 2")
	must(t, a, "CTXEND 2")
	if _, err := a.Request("CTXEND 2"); code(err) != "NOT_FOUND" {
		t.Errorf("ending a context that is not there: %v, want NOT_FOUND", err)
	}
	for _, req := range []string{"CTX", "CTX 99", "CTXEND x"} {
		if _, err := a.Request(req); code(err) != "INVALID" {
			t.Errorf("%s: %v, want INVALID", req, err)
		}
	}
	must(t, a, "CTX 3")
	_ = a.Close()
	deadline := time.Now().Add(5 * time.Second)
	for must(t, b, "PROCS 3") != "0" {
		if time.Now().After(deadline) {
			t.Fatalf("closed connection's context still listed: PROCS 3 = %q", must(t, b, "PROCS 3"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestEvents(t *testing.T) {
	c := dial(t, start(t, "dgxa100"))
	if got := must(t, c, "EVENTS 0"); got != "0" {
		t.Errorf("EVENTS before any = %q", got)
	}
	if got := must(t, c, "XID 3 79"); got != "1" {
		t.Errorf("XID seq %q", got)
	}
	must(t, c, "XID 5 48")
	if got := must(t, c, "EVENTS 0"); got != "2 1:3:79 2:5:48" {
		t.Errorf("EVENTS 0 = %q", got)
	}
	if got := must(t, c, "EVENTS 1"); got != "2 2:5:48" {
		t.Errorf("EVENTS 1 = %q", got)
	}
}

func TestTopologyFollowsTheFakeProfile(t *testing.T) {
	for _, tt := range []struct {
		profile string
		links   string
	}{
		{"dgxa100", "12"}, {"dgxh100", "18"}, {"dgxh200", "18"}, {"dgxb200", "18"},
		{"2x24576:NVIDIA A10", "0"}, {"2x81920:NVIDIA A100-SXM4-80GB", "0"}, // custom: no NVLink
	} {
		c := dial(t, start(t, tt.profile))
		for _, i := range []string{"0", "1"} {
			if got := must(t, c, "TOPO "+i); got != tt.links {
				t.Errorf("%s: TOPO %s = %q, want %q", tt.profile, i, got, tt.links)
			}
		}
	}
}

func TestXIDBreaksTheGPUUntilRecover(t *testing.T) {
	sock := start(t, "2x1024:NVIDIA A10")
	c := dial(t, sock)
	h := must(t, c, "ALLOC 1 1000")
	for _, xid := range []string{"13", "31", "43", "45", "68", "109"} { // application XIDs: event only
		must(t, c, "XID 1 "+xid)
		if got := must(t, c, "MEM 1"); got != strconv.Itoa(1024<<20)+" 1000" {
			t.Errorf("MEM after application XID %s = %q", xid, got)
		}
	}
	must(t, c, "XID 1 79")
	for _, req := range []string{"MEM 1", "PROCS 1", "ALLOC 1 5"} {
		if _, err := c.Request(req); code(err) != "LOST" {
			t.Errorf("%s on a broken GPU: %v, want LOST", req, err)
		}
	}
	// Identity, topology and events still answer; the other GPU is not broken.
	for _, req := range []string{"DEV 1", "TOPO 1", "EVENTS 0", "MEM 0", "PROCS 0", "HELLO x"} {
		must(t, c, req)
	}
	if got := must(t, c, "EVENTS 6"); got != "7 7:1:79" {
		t.Errorf("EVENTS 6 = %q", got)
	}
	// Another connection sees the GPU broken too: the state is the device's.
	if _, err := dial(t, sock).Request("MEM 1"); code(err) != "LOST" {
		t.Errorf("MEM 1 on another connection: %v, want LOST", err)
	}
	must(t, c, "RECOVER 1")
	must(t, c, "RECOVER 1") // recovering a healthy GPU is fine
	if got := must(t, c, "MEM 1"); got != strconv.Itoa(1024<<20)+" 1000" {
		t.Errorf("MEM after RECOVER = %q, want the usage kept", got)
	}
	must(t, c, "PROCS 1")
	if got := must(t, c, "FREE "+h); got != "1000" {
		t.Errorf("FREE = %q", got)
	}
}

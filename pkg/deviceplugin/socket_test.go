package deviceplugin

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// newEventOnlyPlugin returns a plugin whose fallback poll never fires during a test, so every
// re-serve and re-registration it shows was driven by a directory event.
func newEventOnlyPlugin(t *testing.T, dir string) *Plugin {
	t.Helper()
	p, _ := newTestPlugin(t, testConfig(dir), newTestBackend(1, 81559))
	p.opts.WatchInterval = time.Hour
	return p
}

// noMoreRegistrations fails when k received a registration not yet taken from its channel.
func (k *fakeKubelet) noMoreRegistrations(t *testing.T, when string) {
	t.Helper()
	select {
	case r := <-k.regs:
		t.Errorf("%s: an extra registration %v (one kubelet restart must cause one registration)", when, r)
	default:
	}
}

// Bug "re-registers 1-2 s after a kubelet restart": a kubelet restart wipes the plugin's socket
// and creates a new kubelet.sock; the plugin serves again and registers with the new kubelet
// on the directory events alone (the poll is an hour), exactly once.
func TestReRegistrationOnDirectoryEvents(t *testing.T) {
	dir := t.TempDir()
	k := startFakeKubelet(t, dir)
	p := newEventOnlyPlugin(t, dir)
	startServe(t, p)
	if r := k.waitRegistration(t, 5*time.Second); r.Endpoint != SocketName {
		t.Fatalf("first registration = %v", r)
	}
	waitFor(t, "the first registration answered", func() bool { return p.Registrations() == 1 })

	// What the kubelet's devicemanager Start does: remove the sockets in the directory (the old
	// kubelet.sock goes with its listener), then listen on a new kubelet.sock.
	k.srv.Stop()
	_ = os.Remove(filepath.Join(dir, KubeletSocketName))
	// The plugin may already be serving again (it saw kubelet.sock go), in which case its
	// socket is absent for an instant between its server's stop and its new listener.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	k2 := startFakeKubelet(t, dir)
	r := k2.waitRegistration(t, 10*time.Second)
	waitFor(t, "the re-registration answered", func() bool { return p.Registrations() == 2 })
	if r.ResourceName != "nvidia.com/gpu" || r.Endpoint != SocketName || r.Version != pluginapi.Version {
		t.Fatalf("re-registration = %v", r)
	}
	// The kubelet reaches the plugin on its fresh socket.
	if _, err := k2.client(t, SocketName).GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		t.Fatalf("plugin socket after re-registration: %v", err)
	}

	// Own socket deleted, kubelet.sock unchanged: served again and registered again. Events are
	// handled in order, so a duplicate registration caused by the restart above would reach k2
	// before this one.
	if err := os.Remove(filepath.Join(dir, SocketName)); err != nil {
		t.Fatal(err)
	}
	k2.waitRegistration(t, 10*time.Second)
	waitFor(t, "the third registration answered", func() bool { return p.Registrations() == 3 })
	k2.noMoreRegistrations(t, "after the socket was removed")
	if _, err := k2.client(t, SocketName).GetDevicePluginOptions(context.Background(), &pluginapi.Empty{}); err != nil {
		t.Fatalf("plugin socket after it was removed: %v", err)
	}
	if n := p.Registrations(); n != 3 {
		t.Errorf("%d registrations, want 3 (start, kubelet restart, socket removed)", n)
	}
	// Failed attempts are not counted here: net.Listen binds kubelet.sock (the Create event)
	// before it listens, so an attempt in that window is refused and retried 50 ms later, as
	// with a real kubelet. TestRegistrationWhenKubeletStartsLater/RetriesAStaleKubeletSocket
	// covers that retry.
}

// The plugin starts before a kubelet answers on kubelet.sock and registers, once, as soon as
// one does, without waiting for the hour-long poll.
func TestRegistrationWhenKubeletStartsLater(t *testing.T) {
	tests := []struct {
		name string
		// staleSocket: kubelet.sock exists at start but does not answer (a stale file), so
		// registration fails and the plugin retries on its own backoff; otherwise there is no
		// kubelet.sock yet and the plugin registers when it appears.
		staleSocket bool
	}{
		{name: "no kubelet.sock"},
		{name: "RetriesAStaleKubeletSocket", staleSocket: true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			stale := filepath.Join(dir, KubeletSocketName)
			if tc.staleSocket {
				if err := os.WriteFile(stale, nil, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			p := newEventOnlyPlugin(t, dir)
			startServe(t, p)
			waitFor(t, "the plugin socket", func() bool { _, ok := statID(filepath.Join(dir, SocketName)); return ok })
			if tc.staleSocket {
				waitFor(t, "two failed attempts (a retry)", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.regFailed >= 2 })
			}
			if n := p.Registrations(); n != 0 {
				t.Fatalf("%d registrations before a kubelet answers, want 0", n)
			}
			if tc.staleSocket {
				if err := os.Remove(stale); err != nil {
					t.Fatal(err)
				}
			}
			k := startFakeKubelet(t, dir)
			if r := k.waitRegistration(t, 10*time.Second); r.ResourceName != "nvidia.com/gpu" {
				t.Fatalf("registration = %v", r)
			}
			waitFor(t, "the registration answered", func() bool { return p.Registrations() == 1 })
			k.noMoreRegistrations(t, "after kubelet.sock appeared")
		})
	}
}

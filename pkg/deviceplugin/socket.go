package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/fsnotify/fsnotify"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocketName is the kubelet's registration socket in the device-plugin directory.
const KubeletSocketName = "kubelet.sock"

// Registration retry delays after a failed Register call: the first retry, doubled up to the
// last (or WatchInterval when that is shorter).
const (
	registerRetryFirst = 50 * time.Millisecond
	registerRetryMax   = 2 * time.Second
)

// fileID identifies one incarnation of a file: a re-created kubelet.sock has a new inode.
type fileID struct {
	ino   uint64
	mtime time.Time
}

func statID(path string) (fileID, bool) {
	fi, err := os.Stat(path)
	if err != nil {
		return fileID{}, false
	}
	id := fileID{mtime: fi.ModTime()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		id.ino = st.Ino
	}
	return id, true
}

// Serve runs the gRPC server on <DevicePluginDir>/hami-go.sock and registers with the kubelet
// until ctx ends.
//
// A kubelet restart wipes the plugin sockets in the directory, then creates a new kubelet.sock
// (k8s.io/kubernetes v1.37 pkg/kubelet/cm/devicemanager/plugin/v1beta1/server.go Start), and it
// does not wait for device plugins before admitting pods. So, as NVIDIA's k8s-device-plugin
// does, Serve watches the directory with inotify (fsnotify): when its own socket is removed it
// serves again at once, and when kubelet.sock is created (or replaced) it registers at once.
// A poll every Options.WatchInterval (stat of both sockets) is the fallback for a directory
// whose watch failed or was lost.
func (p *Plugin) Serve(ctx context.Context) error {
	dir := p.cfg.DevicePluginDir
	sock := filepath.Join(dir, SocketName)
	kubelet := filepath.Join(dir, KubeletSocketName)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		klog.ErrorS(err, "Cannot create the device plugin directory", "dir", dir)
	}
	var events <-chan fsnotify.Event
	var werrs <-chan error
	w, err := fsnotify.NewWatcher()
	if err != nil {
		klog.ErrorS(err, "Cannot watch the device plugin directory; polling only", "dir", dir, "interval", p.opts.WatchInterval)
	} else {
		defer w.Close()
		events, werrs = w.Events, w.Errors
	}
	retry := registerRetryFirst
	for {
		if w != nil {
			// Re-added every round: a directory that was removed and re-created loses its watch.
			if err := w.Add(dir); err != nil {
				klog.ErrorS(err, "Cannot watch the device plugin directory; polling only", "dir", dir, "interval", p.opts.WatchInterval)
			}
		}
		srv, err := p.listen(sock)
		if err != nil {
			klog.ErrorS(err, "Cannot serve the device plugin socket; retrying", "socket", sock, "in", retry)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(retry):
			}
			retry = min(2*retry, registerRetryMax)
			continue
		}
		retry = registerRetryFirst
		p.registerAndWatch(ctx, sock, kubelet, events, werrs)
		srv.Stop()
		if ctx.Err() != nil {
			_ = os.Remove(sock)
			return nil
		}
	}
}

func (p *Plugin) listen(sock string) (*grpc.Server, error) {
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return nil, err
	}
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, err
	}
	// The file is removed here (before the next Listen) and when Serve returns, never by the
	// listener: a server stopped before its Serve goroutine ran closes its listener late, which
	// would otherwise unlink the next server's socket at the same path.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(p.observeUnary, recoverUnary), grpc.ChainStreamInterceptor(recoverStream))
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(l); err != nil {
			klog.V(2).InfoS("Device plugin gRPC server stopped", "err", err)
		}
	}()
	klog.InfoS("Serving the device plugin", "socket", sock, "resource", p.cfg.Resources.Count)
	return srv, nil
}

// registerAndWatch registers (retrying until it succeeds) and returns when the server must
// start over: own socket gone, kubelet.sock gone or re-created, or ctx done. It looks again at
// every directory event on either socket, at every poll tick and at every registration retry.
func (p *Plugin) registerAndWatch(ctx context.Context, sock, kubelet string, events <-chan fsnotify.Event, werrs <-chan error) {
	var registeredWith fileID
	registered := false
	tick := time.NewTicker(p.opts.WatchInterval)
	defer tick.Stop()
	retryDelay := min(registerRetryFirst, p.opts.WatchInterval)
	var retry <-chan time.Time
	for {
		if _, ok := statID(sock); !ok {
			klog.InfoS("Device plugin socket disappeared (kubelet restart?); serving it again", "socket", sock)
			return
		}
		kid, kok := statID(kubelet)
		switch {
		case registered && (!kok || kid != registeredWith):
			klog.InfoS("kubelet.sock was removed or re-created (kubelet restart); registering again", "socket", kubelet)
			return
		case !registered && kok && retry == nil:
			if err := p.register(ctx, kubelet); err != nil {
				klog.ErrorS(err, "Registration with the kubelet failed; retrying", "socket", kubelet, "in", retryDelay)
				retry = time.After(retryDelay)
				retryDelay = min(2*retryDelay, registerRetryMax, max(p.opts.WatchInterval, registerRetryFirst))
			} else {
				registered, registeredWith = true, kid
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-retry:
			retry = nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			// The loop's stat checks decide; an event only wakes them. A kubelet.sock created
			// while unregistered cancels the backoff: a new kubelet, register now.
			if n := filepath.Base(ev.Name); n == KubeletSocketName || n == SocketName {
				klog.V(2).InfoS("Device plugin directory event", "event", ev.String())
				if n == KubeletSocketName && ev.Has(fsnotify.Create) {
					retry = nil
				}
			}
		case err, ok := <-werrs:
			if !ok {
				werrs = nil
				continue
			}
			klog.ErrorS(err, "Watching the device plugin directory failed; the poll still runs", "interval", p.opts.WatchInterval)
		}
	}
}

func (p *Plugin) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     SocketName,
		ResourceName: p.cfg.Resources.Count,
		Options:      pluginOptions(),
	})
	if err != nil {
		p.mu.Lock()
		p.regFailed++
		p.mu.Unlock()
		return fmt.Errorf("register %s at %s: %w", p.cfg.Resources.Count, kubelet, err)
	}
	p.mu.Lock()
	p.registered++
	p.mu.Unlock()
	klog.InfoS("Registered with the kubelet", "resource", p.cfg.Resources.Count, "endpoint", SocketName)
	return nil
}

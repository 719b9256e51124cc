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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocketName is the kubelet's registration socket in the device-plugin directory.
const KubeletSocketName = "kubelet.sock"

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

// Serve runs the gRPC server on <DevicePluginDir>/hami-go.sock and registers with the kubelet.
// It checks every WatchInterval that its own socket still exists and that kubelet.sock is the
// one it registered with; when the kubelet restarts (kubelet.sock re-created, plugin sockets
// wiped) or the socket disappears, it starts over and registers again. It returns when ctx ends.
func (p *Plugin) Serve(ctx context.Context) error {
	sock := filepath.Join(p.cfg.DevicePluginDir, SocketName)
	kubelet := filepath.Join(p.cfg.DevicePluginDir, KubeletSocketName)
	for {
		srv, err := p.listen(sock)
		if err != nil {
			klog.ErrorS(err, "Cannot serve the device plugin socket; retrying", "socket", sock)
		} else {
			p.registerAndWatch(ctx, sock, kubelet)
			srv.Stop()
		}
		if ctx.Err() != nil {
			_ = os.Remove(sock)
			return nil
		}
		select {
		case <-ctx.Done():
			_ = os.Remove(sock)
			return nil
		case <-time.After(p.opts.WatchInterval):
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
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(recoverUnary), grpc.ChainStreamInterceptor(recoverStream))
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() {
		if err := srv.Serve(l); err != nil {
			klog.V(2).InfoS("Device plugin gRPC server stopped", "err", err)
		}
	}()
	klog.InfoS("Serving the device plugin", "socket", sock, "resource", p.cfg.Resources.Count)
	return srv, nil
}

// registerAndWatch registers (retrying until it succeeds) and returns when the server must start
// over: own socket gone, kubelet.sock re-created, or ctx done.
func (p *Plugin) registerAndWatch(ctx context.Context, sock, kubelet string) {
	var registeredWith fileID
	registered := false
	tick := time.NewTicker(p.opts.WatchInterval)
	defer tick.Stop()
	for {
		if _, ok := statID(sock); !ok {
			klog.InfoS("Device plugin socket disappeared; serving it again", "socket", sock)
			return
		}
		kid, kok := statID(kubelet)
		switch {
		case registered && (!kok || kid != registeredWith):
			klog.InfoS("kubelet.sock was re-created (kubelet restart); registering again", "socket", kubelet)
			return
		case !registered && kok:
			if err := p.register(ctx, kubelet); err != nil {
				klog.ErrorS(err, "Registration with the kubelet failed; retrying", "socket", kubelet)
			} else {
				registered, registeredWith = true, kid
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
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
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("register %s at %s: %w", p.cfg.Resources.Count, kubelet, err)
	}
	p.mu.Lock()
	p.registered++
	p.mu.Unlock()
	klog.InfoS("Registered with the kubelet", "resource", p.cfg.Resources.Count, "endpoint", SocketName)
	return nil
}

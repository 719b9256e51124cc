// Package podeventstest makes a client-go fake clientset's watches fail the way a real API
// server's do, so that unit tests can force an informer to relist (unit tests only; a stand-in
// for kube-apiserver's watch, never used by the components).
package podeventstest

import (
	"sync"
	"sync/atomic"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// WatchGate sits between a fake clientset's object tracker and the watches of one resource.
// Deafen makes every open watch drop the tracker's events (the connection is down: the client
// misses them); Expire ends every open watch with a 410 Gone ERROR event ("too old resource
// version"), which makes a client-go reflector relist. New watches after Expire are served
// normally again.
type WatchGate struct {
	mu      sync.Mutex
	open    []*gatedWatch
	watches int
}

// Gate installs a WatchGate on resource ("pods") of client. Call it before any informer of the
// client starts.
func Gate(client *fake.Clientset, resource string) *WatchGate {
	g := &WatchGate{}
	tracker := client.Tracker()
	client.PrependWatchReactor(resource, func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		inner, err := tracker.Watch(a.GetResource(), a.GetNamespace(), opts)
		if err != nil {
			return true, nil, err
		}
		w := &gatedWatch{inner: inner, out: make(chan watch.Event), stop: make(chan struct{}), expire: make(chan struct{})}
		g.mu.Lock()
		g.open = append(g.open, w)
		g.watches++
		g.mu.Unlock()
		go w.run()
		return true, w, nil
	})
	return g
}

// Watches returns how many watches the gate has served (a relist is followed by a new watch).
func (g *WatchGate) Watches() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.watches
}

// Deafen makes the open watches drop every event from now on, until they end (a watch that is
// down never delivers what happened while it was down, even an event the tracker queued before
// Expire; later watches are served normally).
func (g *WatchGate) Deafen() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, w := range g.open {
		w.deaf.Store(true)
	}
}

// Expire ends every open watch with a 410 Gone ERROR event and serves later watches normally.
func (g *WatchGate) Expire() {
	g.mu.Lock()
	open := g.open
	g.open = nil
	g.mu.Unlock()
	for _, w := range open {
		w.expireOnce.Do(func() { close(w.expire) })
	}
}

// gatedWatch forwards its tracker watch's events unless the gate is deaf, and ends with a 410
// ERROR event when expired.
type gatedWatch struct {
	inner      watch.Interface
	out        chan watch.Event
	stop       chan struct{}
	stopOnce   sync.Once
	expire     chan struct{}
	expireOnce sync.Once
	// deaf drops every event (Deafen), until the watch ends.
	deaf atomic.Bool
}

func (w *gatedWatch) run() {
	defer close(w.out)
	defer w.inner.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-w.expire:
			w.sendGone()
			return
		case ev, ok := <-w.inner.ResultChan():
			if !ok {
				return
			}
			if w.deaf.Load() {
				continue // drained all the same: the tracker's watcher panics when full
			}
			select {
			case w.out <- ev:
			case <-w.stop:
				return
			case <-w.expire: // the event is lost with the watch; the relist recovers it
				w.sendGone()
				return
			}
		}
	}
}

// sendGone sends the ERROR event kube-apiserver ends a watch with when its resourceVersion is
// too old: a Status with reason Expired, code 410.
func (w *gatedWatch) sendGone() {
	st := apierrors.NewResourceExpired("too old resource version (watch expired by podeventstest)").ErrStatus
	select {
	case w.out <- watch.Event{Type: watch.Error, Object: &st}:
	case <-w.stop:
	}
}

// Stop implements watch.Interface.
func (w *gatedWatch) Stop() { w.stopOnce.Do(func() { close(w.stop) }) }

// ResultChan implements watch.Interface.
func (w *gatedWatch) ResultChan() <-chan watch.Event { return w.out }

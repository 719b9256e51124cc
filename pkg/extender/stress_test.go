package extender

import (
	"fmt"
	"sync"
	"testing"

	"github.com/hami-go/hami-go/internal/podtest"
	corev1 "k8s.io/api/core/v1"
)

// Invariant under concurrent Filter, Bind and deletion (informer deletes and ended pods racing
// the binds): no GPU exceeds its split count, memory or cores, and usage always equals the sum of
// the bookings; after everything is deleted, nothing is booked.
func TestConcurrentFilterBindDelete(t *testing.T) {
	objs, names := setupNodes(t, testInventory("node-1", 2, 24576, 4), testInventory("node-2", 2, 24576, 4))
	e := newEnv(t, nil, objs...)
	e.waitNodes(names...)
	const n = 60
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		p := podtest.Pending("s", fmt.Sprintf("p-%02d", i), podtest.GPU("main", 1, "5000", 0))
		e.create(p)
		wg.Add(1)
		go func(i int, p *corev1.Pod) {
			defer wg.Done()
			_, _ = e.schedule(p, names)
			checkInvariants(t, e.ext.cache)
			switch i % 3 {
			case 0:
				e.deletePod(p.Namespace, p.Name)
			case 1:
				got := e.getPod(p.Namespace, p.Name)
				got.Status.Phase = corev1.PodSucceeded
				e.updatePod(got)
			}
			checkInvariants(t, e.ext.cache)
		}(i, p)
	}
	wg.Wait()
	for i := 0; i < n; i++ {
		if i%3 == 2 {
			e.deletePod("s", fmt.Sprintf("p-%02d", i))
		}
	}
	eventually(t, "everything released", func() bool {
		for _, node := range names {
			for _, g := range e.ext.cache.NodeGPUUsage(node) {
				if g.Usage.Sharers != 0 || g.Usage.MemoryMiB != 0 {
					return false
				}
			}
		}
		return true
	})
	checkInvariants(t, e.ext.cache)
}

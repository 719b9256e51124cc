package schedperf

import (
	"context"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/deviceplugin"
)

// claimAsAllocated stands in for the kubelet's Allocate and the device plugin's claim writer,
// which scheduler_perf (Node objects, no kubelets) does not have: every pod bound with hami-go's
// planned record gets, once, the claimed record the device plugin writes when Allocate serves
// that plan (AnnoClaimed equal to AnnoPlanned, by deviceplugin.PatchClaimed with the pod's UID as
// precondition). Without it every bound pod stays "not yet allocated" and the extender
// serializes other shapes on its node (case C20), so no mixed workload could run. It runs until
// ctx ends; a benchmark stand-in only, never a product path.
func claimAsAllocated(ctx context.Context, cs kubernetes.Interface) {
	f := informers.NewSharedInformerFactory(cs, 0)
	q := workqueue.NewTyped[device.PodRef]()
	pods := f.Core().V1().Pods()
	enqueue := func(obj any) {
		p, ok := obj.(*v1.Pod)
		if !ok || p.Spec.NodeName == "" {
			return
		}
		if _, planned := p.Annotations[device.AnnoPlanned]; !planned {
			return
		}
		if _, claimed := p.Annotations[device.AnnoClaimed]; claimed {
			return
		}
		q.Add(device.RefOf(p))
	}
	_, _ = pods.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, n any) { enqueue(n) },
	})
	f.Start(ctx.Done())
	go func() { <-ctx.Done(); q.ShutDown() }()
	f.WaitForCacheSync(ctx.Done())
	lister := pods.Lister()
	for i := 0; i < workers; i++ {
		go func() {
			for {
				r, quit := q.Get()
				if quit {
					return
				}
				p, err := lister.Pods(r.Namespace).Get(r.Name)
				if err == nil && p.UID == r.UID {
					planned := p.Annotations[device.AnnoPlanned]
					if _, claimed := p.Annotations[device.AnnoClaimed]; !claimed && planned != "" {
						pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
						if err := deviceplugin.PatchClaimed(pctx, cs, r, &planned); err != nil && ctx.Err() == nil {
							klog.V(2).InfoS("Claiming a bound pod's plan (stand-in Allocate)", "pod", r.Exact(), "err", err)
						}
						cancel()
					}
				}
				q.Done(r)
			}
		}()
	}
	<-ctx.Done()
}

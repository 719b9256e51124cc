package nodeagent

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
)

// NodePods is an informer on the pods bound to one node (field selector spec.nodeName, the
// kubelet's own view; RBAC: pods list and watch), for what they hold (Held). The device plugin's
// PodSync keeps its own such informer, which also feeds its ledger.
type NodePods struct {
	node    string
	factory informers.SharedInformerFactory
	lister  corelisters.PodLister
	synced  cache.InformerSynced
}

// NewNodePods sets up the informer; nothing runs until Start.
func NewNodePods(client kubernetes.Interface, node string) *NodePods {
	f := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", node).String()
	}))
	i := f.Core().V1().Pods()
	return &NodePods{node: node, factory: f, lister: i.Lister(), synced: i.Informer().HasSynced}
}

// Start runs the informer until ctx ends and waits up to timeout for its first list; Held
// counts nothing until then (the figures are the GPUs' own), which the log says.
func (n *NodePods) Start(ctx context.Context, timeout time.Duration) {
	n.factory.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), n.synced) {
		klog.ErrorS(nil, "The node's pods are not listed yet; what they hold is not counted until they are", "node", n.node, "waited", timeout)
	}
}

// Held returns what the pods bound to the node hold of names (HeldBy); 0 each before the first
// list.
func (n *NodePods) Held(names ...corev1.ResourceName) NodeResources {
	if !n.synced() {
		return HeldBy(nil, names...)
	}
	pods, err := n.lister.List(labels.Everything())
	if err != nil {
		pods = nil
	}
	return HeldBy(pods, names...)
}

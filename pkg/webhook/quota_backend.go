package webhook

import (
	"context"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

// QuotaCache implements Quotas from a client-go informer on every namespace's ResourceQuotas
// (RBAC: list and watch resourcequotas), so an admission makes no API call. A quota created
// while a pod is admitted may be seen a moment late; such a pod is one the quota would not have
// counted either way (Kubernetes' quota never applies retroactively).
type QuotaCache struct {
	factory informers.SharedInformerFactory
	lister  corelisters.ResourceQuotaLister
	synced  cache.InformerSynced
}

// NewQuotaCache sets up the informer on client; nothing runs until Start.
func NewQuotaCache(client kubernetes.Interface) *QuotaCache {
	f := informers.NewSharedInformerFactory(client, 0)
	i := f.Core().V1().ResourceQuotas()
	c := &QuotaCache{factory: f, lister: i.Lister(), synced: i.Informer().HasSynced}
	return c
}

// Start runs the informer until ctx ends and waits up to timeout for its first list.
func (c *QuotaCache) Start(ctx context.Context, timeout time.Duration) error {
	c.factory.Start(ctx.Done())
	wctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if !cache.WaitForCacheSync(wctx.Done(), c.synced) {
		return fmt.Errorf("the ResourceQuota cache did not sync within %s (RBAC: list/watch resourcequotas)", timeout)
	}
	return nil
}

// Synced reports whether the cache has its first list (the readiness check).
func (c *QuotaCache) Synced() bool { return c.synced() }

// Quota implements Quotas: the first (by name) ResourceQuota of namespace whose spec.hard
// holds key. Scoped quotas count too (the webhook does not evaluate scopes: refusing a
// container that a scoped quota would not count is the safe side).
func (c *QuotaCache) Quota(namespace string, key corev1.ResourceName) (string, bool) {
	qs, err := c.lister.ResourceQuotas(namespace).List(labels.Everything())
	if err != nil {
		return "", false
	}
	var names []string
	for _, q := range qs {
		if _, ok := q.Spec.Hard[key]; ok {
			names = append(names, q.Name)
		}
	}
	if len(names) == 0 {
		return "", false
	}
	sort.Strings(names)
	return names[0], true
}

package webhook

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/hami-go/hami-go/pkg/device"
)

type hamiQuotaEnv struct {
	t      *testing.T
	client *fake.Clientset
	events *record.FakeRecorder
	ns     string
}

// startHAMiQuota runs the controller on a fake clientset (one shared informer factory, as in
// the webhook) until the test ends.
func startHAMiQuota(t *testing.T) *hamiQuotaEnv {
	t.Helper()
	client := fake.NewClientset()
	f := informers.NewSharedInformerFactory(client, 0)
	rec := record.NewFakeRecorder(100)
	c, err := NewHAMiQuotaController(client, f.Core().V1().ResourceQuotas(), device.DefaultResourceNames(), rec)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	f.Start(ctx.Done())
	go func() { done <- c.Run(ctx, 1) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
		f.Shutdown()
	})
	f.WaitForCacheSync(ctx.Done())
	return &hamiQuotaEnv{t: t, client: client, events: rec, ns: "team"}
}

func (e *hamiQuotaEnv) rq() interface {
	Create(context.Context, *corev1.ResourceQuota, metav1.CreateOptions) (*corev1.ResourceQuota, error)
	Update(context.Context, *corev1.ResourceQuota, metav1.UpdateOptions) (*corev1.ResourceQuota, error)
	Get(context.Context, string, metav1.GetOptions) (*corev1.ResourceQuota, error)
	Delete(context.Context, string, metav1.DeleteOptions) error
} {
	return e.client.CoreV1().ResourceQuotas(e.ns)
}

func (e *hamiQuotaEnv) create(q *corev1.ResourceQuota) {
	e.t.Helper()
	q.Namespace = e.ns
	if _, err := e.rq().Create(context.Background(), q, metav1.CreateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// edit applies f to the stored quota name.
func (e *hamiQuotaEnv) edit(name string, f func(*corev1.ResourceQuota)) {
	e.t.Helper()
	q, err := e.rq().Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	f(q)
	if _, err := e.rq().Update(context.Background(), q, metav1.UpdateOptions{}); err != nil {
		e.t.Fatal(err)
	}
}

// eventually polls cond (which says what it saw) for up to 5 s.
func (e *hamiQuotaEnv) eventually(what string, cond func() (bool, string)) {
	e.t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		ok, s := cond()
		last = s
		return ok, nil
	})
	if err != nil {
		e.t.Fatalf("%s: last saw %s", what, last)
	}
}

// waitSibling waits until the sibling name exists with exactly hard (MiB / percent values).
func (e *hamiQuotaEnv) waitSibling(name string, hard map[corev1.ResourceName]int64) *corev1.ResourceQuota {
	e.t.Helper()
	var got *corev1.ResourceQuota
	e.eventually("sibling "+name, func() (bool, string) {
		q, err := e.rq().Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		got = q
		if len(q.Spec.Hard) != len(hard) {
			return false, fmt.Sprint(q.Spec.Hard)
		}
		for k, v := range hard {
			if x, ok := q.Spec.Hard[k]; !ok || x.Value() != v {
				return false, fmt.Sprint(q.Spec.Hard)
			}
		}
		return q.Labels[LabelManagedBy] == ManagedByHAMiGo, fmt.Sprint(q.Labels)
	})
	return got
}

func (e *hamiQuotaEnv) waitGone(name string) {
	e.t.Helper()
	e.eventually(name+" deleted", func() (bool, string) {
		_, err := e.rq().Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
}

func (e *hamiQuotaEnv) waitEvent(substr string) {
	e.t.Helper()
	e.eventually("event "+substr, func() (bool, string) {
		select {
		case ev := <-e.events.Events:
			return strings.Contains(ev, substr), ev
		default:
			return false, "no event"
		}
	})
}

// writes lists the (verb, name) of every create, update and delete of a ResourceQuota.
func (e *hamiQuotaEnv) writes() map[string][]string {
	out := map[string][]string{}
	for _, a := range e.client.Actions() {
		if a.GetResource().Resource != "resourcequotas" {
			continue
		}
		var name string
		switch a := a.(type) {
		case k8stesting.CreateAction:
			name = a.GetObject().(*corev1.ResourceQuota).Name
		case k8stesting.UpdateAction:
			name = a.GetObject().(*corev1.ResourceQuota).Name
		case k8stesting.DeleteAction:
			name = a.GetName()
		default:
			continue
		}
		out[name] = append(out[name], a.GetVerb())
	}
	return out
}

func quota(name string, uid types.UID, hard map[string]string) *corev1.ResourceQuota {
	q := hamiSource(name, hard)
	q.UID = uid
	return q
}

var (
	hqMem   = corev1.ResourceName(device.QuotaResourceGPUMemory)
	hqCores = corev1.ResourceName(device.QuotaResourceGPUCores)
)

// The life of a sibling: created with the source, updated with it, restored after others'
// edits and deletion, the smaller of both spellings, deleted when the source drops HAMi's keys,
// and (no garbage collector here) deleted by the controller when the source is gone.
func TestHAMiQuotaControllerLifecycle(t *testing.T) {
	e := startHAMiQuota(t)
	ctx := context.Background()
	e.create(quota("gpu", "uid-gpu", map[string]string{"limits.nvidia.com/gpumem": "40000", "pods": "10"}))
	sib := e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 40000})
	if ref := metav1.GetControllerOf(sib); ref == nil || ref.Kind != "ResourceQuota" || ref.Name != "gpu" || ref.UID != "uid-gpu" {
		t.Fatalf("owner references %+v", sib.OwnerReferences)
	}
	if sib.Labels[LabelHAMiQuotaSource] != "gpu" {
		t.Fatalf("labels %v", sib.Labels)
	}

	// source edited: a new figure and the cores key in HAMi's guide's spelling
	e.edit("gpu", func(q *corev1.ResourceQuota) {
		q.Spec.Hard["limits.nvidia.com/gpumem"] = resource.MustParse("50000")
		q.Spec.Hard["limit.nvidia.com/gpucores"] = resource.MustParse("200")
	})
	e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 50000, hqCores: 200})

	// both spellings: the smaller
	e.edit("gpu", func(q *corev1.ResourceQuota) { q.Spec.Hard["limit.nvidia.com/gpumem"] = resource.MustParse("30000") })
	e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 30000, hqCores: 200})

	// the sibling edited by someone else (figure raised, a key added, the label removed): restored
	e.edit("gpu-hami-go", func(q *corev1.ResourceQuota) {
		q.Spec.Hard[hqMem] = resource.MustParse("999999")
		q.Spec.Hard["pods"] = resource.MustParse("1")
		delete(q.Labels, LabelManagedBy)
	})
	e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 30000, hqCores: 200})

	// the sibling deleted by someone else: restored
	if err := e.rq().Delete(ctx, "gpu-hami-go", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 30000, hqCores: 200})

	// the source drops HAMi's keys: the sibling goes
	e.edit("gpu", func(q *corev1.ResourceQuota) {
		q.Spec.Hard = corev1.ResourceList{"pods": resource.MustParse("10")}
	})
	e.waitGone("gpu-hami-go")

	// back, then the source deleted: the orphan goes (a real cluster's GC would too)
	e.edit("gpu", func(q *corev1.ResourceQuota) { q.Spec.Hard["limits.nvidia.com/gpumem"] = resource.MustParse("1000") })
	e.waitSibling("gpu-hami-go", map[corev1.ResourceName]int64{hqMem: 1000})
	if err := e.rq().Delete(ctx, "gpu", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	e.waitGone("gpu-hami-go")
}

// A scoped source's sibling carries its scopes and scope selector.
func TestHAMiQuotaControllerScoped(t *testing.T) {
	e := startHAMiQuota(t)
	q := quota("high", "uid-high", map[string]string{"limit.nvidia.com/gpumem": "8000"})
	q.Spec.Scopes = []corev1.ResourceQuotaScope{corev1.ResourceQuotaScopeNotBestEffort}
	q.Spec.ScopeSelector = &corev1.ScopeSelector{MatchExpressions: []corev1.ScopedResourceSelectorRequirement{{
		ScopeName: corev1.ResourceQuotaScopePriorityClass, Operator: corev1.ScopeSelectorOpIn, Values: []string{"high"},
	}}}
	e.create(q)
	sib := e.waitSibling("high-hami-go", map[corev1.ResourceName]int64{hqMem: 8000})
	if len(sib.Spec.Scopes) != 1 || sib.Spec.Scopes[0] != corev1.ResourceQuotaScopeNotBestEffort || sib.Spec.ScopeSelector == nil ||
		sib.Spec.ScopeSelector.MatchExpressions[0].ScopeName != corev1.ResourceQuotaScopePriorityClass || sib.Spec.ScopeSelector.MatchExpressions[0].Values[0] != "high" {
		t.Fatalf("sibling spec %+v", sib.Spec)
	}
	// a scope edited on the source follows
	e.edit("high", func(q *corev1.ResourceQuota) {
		q.Spec.ScopeSelector.MatchExpressions[0].Values = []string{"high", "urgent"}
	})
	e.eventually("scope selector follows", func() (bool, string) {
		s, err := e.rq().Get(context.Background(), "high-hami-go", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		return len(s.Spec.ScopeSelector.MatchExpressions[0].Values) == 2, fmt.Sprint(s.Spec.ScopeSelector)
	})
}

// Users' own quotas are never written: an unrelated one, one that carries hami-go's
// translated key itself, one that squats the sibling's name (an Event on the source says so),
// and one posing as a sibling of another kind's object. An invalid value gets an Event.
func TestHAMiQuotaControllerLeavesOthersAlone(t *testing.T) {
	e := startHAMiQuota(t)
	e.create(quota("plain", "uid-plain", map[string]string{"pods": "10", "limits.cpu": "4"}))
	e.create(quota("own", "uid-own", map[string]string{device.QuotaResourceGPUMemory: "20000"}))
	squat := quota("taken-hami-go", "uid-squat", map[string]string{"pods": "3"})
	e.create(squat)
	poser := quota("poser", "uid-poser", map[string]string{"pods": "1"})
	poser.Labels = map[string]string{LabelManagedBy: ManagedByHAMiGo}
	poser.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "Deployment", Name: "x", UID: "uid-x", Controller: ptrTo(true)}}
	e.create(poser)
	e.create(quota("taken", "uid-taken", map[string]string{"limits.nvidia.com/gpumem": "40000"}))
	e.waitEvent(ReasonHAMiQuotaNameTaken)
	e.create(quota("bad", "uid-bad", map[string]string{"limits.nvidia.com/gpumem": "1.5"}))
	e.waitEvent("spec.hard[limits.nvidia.com/gpumem]: 1500m is not a whole number")
	// a last, good source proves the queue has passed all of the above
	e.create(quota("good", "uid-good", map[string]string{"limits.nvidia.com/gpucores": "100"}))
	e.waitSibling("good-hami-go", map[corev1.ResourceName]int64{hqCores: 100})
	if _, err := e.rq().Get(context.Background(), "bad-hami-go", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("bad-hami-go: %v, want none", err)
	}
	w := e.writes()
	for name, verbs := range w {
		if name != "good-hami-go" && (len(verbs) != 1 || verbs[0] != "create") {
			t.Errorf("%s: written %v by the controller", name, verbs)
		}
	}
	if len(w["good-hami-go"]) != 1 {
		t.Errorf("good-hami-go: %v", w["good-hami-go"])
	}
	if len(w) != 8 {
		t.Errorf("writes %v: want the test's 7 creates and the one sibling", w)
	}
	q, err := e.rq().Get(context.Background(), "taken-hami-go", metav1.GetOptions{})
	if err != nil || len(q.Spec.Hard) != 1 || q.Labels != nil {
		t.Fatalf("the squatter changed: %+v %v", q, err)
	}
}

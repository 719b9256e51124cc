package nodeagent

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

const relNS = "hami-go-system"

// uninstallCluster is a fake API with the release's agent DaemonSet, scheduler Deployment and
// leader Lease, recording each delete (kind/name/propagation) in order. A workload deleted with
// propagation Foreground stays (as while the garbage collector deletes its pods) until release
// is called for it.
type uninstallCluster struct {
	client *fake.Clientset
	mu     sync.Mutex
	calls  []string
	held   map[string]bool // "kind/name" deleted in foreground, still there
}

func newUninstallCluster() *uninstallCluster {
	u := &uninstallCluster{held: map[string]bool{}}
	u.client = fake.NewClientset(
		&appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: relNS, Name: "hami-go-device-plugin"}},
		&appsv1.Deployment{ObjectMeta: metav1.ObjectMeta{Namespace: relNS, Name: "hami-go-scheduler"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Namespace: relNS, Name: "hami-go-scheduler"}},
	)
	u.client.PrependReactor("delete", "*", func(a k8stesting.Action) (bool, runtime.Object, error) {
		d := a.(k8stesting.DeleteActionImpl)
		u.mu.Lock()
		defer u.mu.Unlock()
		prop := "default"
		if p := d.DeleteOptions.PropagationPolicy; p != nil {
			prop = string(*p)
		}
		u.calls = append(u.calls, d.Resource.Resource+"/"+d.Name+"/"+prop)
		if prop == string(metav1.DeletePropagationForeground) {
			u.held[d.Resource.Resource+"/"+d.Name] = true
			return true, nil, nil // marked deleted; the object stays until release
		}
		return false, nil, nil
	})
	return u
}

// release lets the garbage collector finish: the foreground-deleted object goes.
func (u *uninstallCluster) release(t *testing.T, resource, name string) {
	t.Helper()
	u.mu.Lock()
	delete(u.held, resource+"/"+name)
	u.mu.Unlock()
	if err := u.client.Tracker().Delete(appsv1.SchemeGroupVersion.WithResource(resource), relNS, name); err != nil {
		t.Fatalf("release %s/%s: %v", resource, name, err)
	}
}

func (u *uninstallCluster) callList() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]string(nil), u.calls...)
}

// Issue 28: the hook deletes the agents' DaemonSets and the scheduler in foreground, waits until
// they are gone (their pods stopped while the RBAC existed), and only then deletes the leader
// Lease, which the scheduler would otherwise recreate.
func TestUninstallWaitsForTheWorkloadsThenDeletesTheLeases(t *testing.T) {
	c := newUninstallCluster()
	u := Uninstall{Client: c.client, Namespace: relNS, DaemonSets: []string{"hami-go-device-plugin", "hami-go-mps-control-daemon"},
		Deployments: []string{"hami-go-scheduler"}, Leases: []string{"hami-go-scheduler"}, Timeout: 10 * time.Second, Poll: 10 * time.Millisecond}
	done := make(chan error, 1)
	go func() { done <- u.Run(context.Background()) }()

	time.Sleep(100 * time.Millisecond)
	select {
	case err := <-done:
		t.Fatalf("Run returned (%v) while the workloads were still being deleted", err)
	default:
	}
	want := []string{"daemonsets/hami-go-device-plugin/Foreground", "daemonsets/hami-go-mps-control-daemon/Foreground", "deployments/hami-go-scheduler/Foreground"}
	if got := c.callList(); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("deletes %v, want %v (the Lease must wait for the scheduler to be gone)", got, want)
	}
	c.release(t, "daemonsets", "hami-go-device-plugin")
	time.Sleep(50 * time.Millisecond)
	if got := c.callList(); len(got) != 3 {
		t.Fatalf("deletes %v after the DaemonSet went, while the scheduler is still there", got)
	}
	c.release(t, "deployments", "hami-go-scheduler")
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return once the workloads were gone")
	}
	if got := c.callList(); got[len(got)-1] != "leases/hami-go-scheduler/default" {
		t.Errorf("last delete %q, want the leader Lease", got[len(got)-1])
	}
	if _, err := c.client.CoordinationV1().Leases(relNS).Get(context.Background(), "hami-go-scheduler", metav1.GetOptions{}); err == nil {
		t.Error("the leader Lease is still there")
	}
}

func TestUninstallTimeoutNamesWhatIsLeft(t *testing.T) {
	c := newUninstallCluster()
	u := Uninstall{Client: c.client, Namespace: relNS, DaemonSets: []string{"hami-go-device-plugin"},
		Leases: []string{"hami-go-scheduler"}, Timeout: 100 * time.Millisecond, Poll: 10 * time.Millisecond}
	err := u.Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "DaemonSet hami-go-device-plugin") || !strings.Contains(err.Error(), "--no-hooks") {
		t.Fatalf("error %v, want one naming the DaemonSet still there and --no-hooks", err)
	}
	if _, err := c.client.CoordinationV1().Leases(relNS).Get(context.Background(), "hami-go-scheduler", metav1.GetOptions{}); err != nil {
		t.Errorf("the Lease was deleted although the workloads were not gone: %v", err)
	}
}

func TestParseUninstall(t *testing.T) {
	env := func(k string) string { return map[string]string{"POD_NAMESPACE": "rel"}[k] }
	u, kc, err := ParseUninstall([]string{"--daemonsets=a,b", "--deployments=s", "--leases=s", "--timeout=90s"}, env)
	if err != nil || u.Namespace != "rel" || strings.Join(u.DaemonSets, ",") != "a,b" || u.Deployments[0] != "s" || u.Leases[0] != "s" || u.Timeout != 90*time.Second || kc != "" {
		t.Errorf("ParseUninstall = %+v, %q, %v", u, kc, err)
	}
	for args, want := range map[string]string{
		"--timeout=0":  "--timeout must be positive",
		"extra":        "unexpected arguments",
		"--namespace=": "--namespace is empty",
	} {
		if _, _, err := ParseUninstall([]string{args}, env); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", args, err, want)
		}
	}
}

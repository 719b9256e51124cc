package drapreempt

import (
	"context"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// LeaseName is the Lease (in the webhook's namespace) whose holder runs the controller: the
// webhook runs several replicas, and only one may preempt.
const LeaseName = "hami-go-dra-preemption"

// Run runs the controller until ctx ends, in the replica that holds the Lease LeaseName in
// namespace (leader election: 15 s lease, 10 s renew deadline). Events are written as
// component "hami-go-dra-preemption".
func Run(ctx context.Context, client kubernetes.Interface, namespace string, cfg Config) error {
	id, _ := os.Hostname()
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1ObjectMeta(namespace),
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: lock, LeaseDuration: 15 * time.Second, RenewDeadline: 10 * time.Second, RetryPeriod: 2 * time.Second,
		ReleaseOnCancel: true, Name: LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				if err := lead(ctx, client, cfg); err != nil {
					klog.ErrorS(err, "DRA preemption stopped")
				}
			},
			OnStoppedLeading: func() {
				klog.InfoS("DRA preemption: lost or released the Lease", "lease", klog.KRef(namespace, LeaseName))
			},
		},
	})
	if err != nil {
		return err
	}
	for ctx.Err() == nil { // a lost Lease returns from Run: stand again
		le.Run(ctx)
	}
	return nil
}

func lead(ctx context.Context, client kubernetes.Interface, cfg Config) error {
	b := record.NewBroadcaster(record.WithContext(ctx))
	defer b.Shutdown()
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "hami-go-dra-preemption"})
	f := informers.NewSharedInformerFactory(client, 0)
	c, err := New(client, f, rec, clock.RealClock{}, cfg)
	if err != nil {
		return err
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	return c.Run(ctx)
}

func metav1ObjectMeta(namespace string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: namespace, Name: LeaseName}
}

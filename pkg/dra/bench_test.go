package dra

import (
	"os"
	"sort"
	"strconv"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
)

// BenchmarkPrepareResourceClaims times the driver's PrepareResourceClaims for a one-GPU claim
// already read (the helper's claim read from the API server is not included): resolve, env
// build, CDI spec write (on tmpfs where /dev/shm is one, as /var/run/cdi is on a node) and
// checkpoint write (on the test's disk folder, atomic rename, no fsync). Each iteration
// prepares a fresh claim (new UID); the claim is unprepared outside the timed part. Reports
// p50/p99 per call (issue 13 target: p99 <= 1 ms).
func BenchmarkPrepareResourceClaims(b *testing.B) {
	cfg := testConfig(b.TempDir())
	if shm, err := os.MkdirTemp("/dev/shm", "hami-go-cdi-"); err == nil {
		// The CDI directory on tmpfs, as the default /var/run/cdi is on a node (/run is tmpfs);
		// the checkpoint stays on the test's disk folder, as under /var/lib/kubelet.
		b.Cleanup(func() { os.RemoveAll(shm) })
		cfg.CDIDir = shm
	}
	d, _ := newTestDriver(b, cfg, "dgxh100")
	lat := make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		c := testClaim("bench", 4000, 25, result{device: "gpu-0", memMiB: 4000, cores: 25})
		c.UID = types.UID("uid-bench-" + strconv.Itoa(i))
		b.StartTimer()
		start := time.Now()
		res, err := d.PrepareResourceClaims(bg, []*resourceapi.ResourceClaim{c})
		lat = append(lat, time.Since(start))
		b.StopTimer()
		if err != nil || res[c.UID].Err != nil {
			b.Fatal(err, res[c.UID].Err)
		}
		obj := kubeletplugin.NamespacedObject{UID: c.UID}
		if _, err := d.UnprepareResourceClaims(bg, []kubeletplugin.NamespacedObject{obj}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
	b.ReportMetric(float64(lat[(len(lat)*99)/100].Microseconds()), "p99-µs")
}

package allocator

import (
	"fmt"
	"testing"
)

// BenchmarkFilterScale/nodes=N: one op is Fit and, where it fits, Score of one 1-slice +
// 8000 MiB pod against N nodes × 8 GPUs of 81920 MiB with 4 pods per GPU placed on average
// (benchFleet(N, 32 N)), for N = 100, 1,000, 5,000, 10,000: the allocator's share of one
// extender filter call as the cluster grows (hack/bench, docs/bench/report.md).
func BenchmarkFilterScale(b *testing.B) {
	for _, nodes := range []int{100, 1000, 5000, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			invs, used := benchFleet(nodes, nodes*32)
			req := pod(ctr("main", 1, 8000, 10))
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				fit, total := 0, 0
				for n := range invs {
					if Fit(invs[n], used[n], req) == nil {
						fit++
						total += Score(invs[n], used[n], req)
					}
				}
				if fit == 0 || total == 0 {
					b.Fatalf("%d nodes fit, total score %d", fit, total)
				}
			}
		})
	}
}

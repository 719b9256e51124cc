package extender

// The HTTP half of BenchmarkExtenderScale runs its client in a separate process, as
// kube-scheduler is one: the client's JSON decoding and its garbage collection then do not run
// on (and are not charged to) the extender's heap of tens of MiB, and the extender's collections
// do not stall the client. The client is this test binary started again with
// -test.run=^TestScaleHTTPClient$ and $HAMI_GO_BENCH_CLIENT naming a file of clientJob; it
// decodes the replies with encoding/json, as kube-scheduler's HTTPExtender does
// (k8s.io/kubernetes pkg/scheduler/extender.go), and writes one latency per call.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	extenderv1 "k8s.io/kube-scheduler/extender/v1"
)

// clientJob is what the benchmark hands its client process.
type clientJob struct {
	// URL is the verb's endpoint, e.g. http://127.0.0.1:41234/prioritize.
	URL string
	// Verb is "filter" or "prioritize": which reply type to decode.
	Verb string
	// BodyFile holds the request body (JSON ExtenderArgs).
	BodyFile string
	// Calls is how many calls are timed, after clientWarmup untimed ones.
	Calls int
	// Nodes is how many nodes every reply must name (filter: fitting; prioritize: scored).
	Nodes int
	// Out is where the client writes its latencies (JSON array of nanoseconds, one per call).
	Out string
}

// clientWarmup calls open the keep-alive connection and size the buffers before timing starts.
const clientWarmup = 3

// runClientProcess starts the client process for job and returns its latencies.
func runClientProcess(b *testing.B, job clientJob) []time.Duration {
	b.Helper()
	dir := b.TempDir()
	job.Out = filepath.Join(dir, "latencies.json")
	spec, err := json.Marshal(job)
	if err != nil {
		b.Fatal(err)
	}
	jobFile := filepath.Join(dir, "job.json")
	if err := os.WriteFile(jobFile, spec, 0o600); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestScaleHTTPClient$", "-test.count=1")
	cmd.Env = append(os.Environ(), "HAMI_GO_BENCH_CLIENT="+jobFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("client process: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(job.Out)
	if err != nil {
		b.Fatal(err)
	}
	var ns []int64
	if err := json.Unmarshal(raw, &ns); err != nil || len(ns) != job.Calls {
		b.Fatalf("client wrote %d latencies (%v), want %d", len(ns), err, job.Calls)
	}
	lat := make([]time.Duration, len(ns))
	for i, v := range ns {
		lat[i] = time.Duration(v)
	}
	return lat
}

// TestScaleHTTPClient is the benchmark's client process; it is skipped unless
// $HAMI_GO_BENCH_CLIENT names a clientJob file.
func TestScaleHTTPClient(t *testing.T) {
	jobFile := os.Getenv("HAMI_GO_BENCH_CLIENT")
	if jobFile == "" {
		t.Skip("the client process of BenchmarkExtenderScale; started by the benchmark")
	}
	raw, err := os.ReadFile(jobFile)
	if err != nil {
		t.Fatal(err)
	}
	var job clientJob
	if err := json.Unmarshal(raw, &job); err != nil {
		t.Fatalf("job %s: %v", jobFile, err)
	}
	body, err := os.ReadFile(job.BodyFile)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 30 * time.Second}
	ns := make([]int64, 0, job.Calls)
	for i := 0; i < clientWarmup+job.Calls; i++ {
		start := time.Now()
		got, err := clientCall(client, job, body)
		if err != nil {
			t.Fatal(err)
		}
		if got != job.Nodes {
			t.Fatalf("%s answered %d nodes, want %d", job.Verb, got, job.Nodes)
		}
		if i >= clientWarmup {
			ns = append(ns, time.Since(start).Nanoseconds())
		}
	}
	out, err := json.Marshal(ns)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(job.Out, out, 0o600); err != nil {
		t.Fatal(err)
	}
}

// clientCall posts body and decodes the reply as kube-scheduler does; it returns how many nodes
// the reply names (filter: NodeNames; prioritize: entries).
func clientCall(client *http.Client, job clientJob, body []byte) (int, error) {
	resp, err := client.Post(job.URL, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return 0, fmt.Errorf("%s: status %d: %.200s", job.Verb, resp.StatusCode, msg)
	}
	dec := json.NewDecoder(resp.Body)
	if job.Verb == "filter" {
		var res extenderv1.ExtenderFilterResult
		if err := dec.Decode(&res); err != nil || res.NodeNames == nil {
			return 0, fmt.Errorf("filter reply: %v (NodeNames %v)", err, res.NodeNames)
		}
		return len(*res.NodeNames), nil
	}
	var res extenderv1.HostPriorityList
	if err := dec.Decode(&res); err != nil {
		return 0, fmt.Errorf("prioritize reply: %v", err)
	}
	return len(res), nil
}

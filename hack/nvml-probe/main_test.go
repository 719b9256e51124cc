package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hami-go/hami-go/pkg/fake"
)

func TestRunOnFakeFleet(t *testing.T) {
	var buf bytes.Buffer
	cfg := config{Watch: 3 * time.Second, FakeProfile: "dgxh200", FakeNode: "gpu-node-1", FakeInjectXID: 79}
	if err := run(context.Background(), cfg, &buf); err != nil {
		t.Fatalf("run: %v\n%s", err, buf.String())
	}
	var rep report
	if err := json.Unmarshal(buf.Bytes(), &rep); err != nil {
		t.Fatalf("report is not JSON: %v\n%s", err, buf.String())
	}
	if rep.Backend != "fake" || len(rep.GPUs) != 8 || len(rep.Failures) != 0 {
		t.Fatalf("report = backend %q, %d GPUs, failures %v; want fake, 8, none", rep.Backend, len(rep.GPUs), rep.Failures)
	}
	for i, g := range rep.GPUs {
		if g.UUID != fake.GPUUUID("gpu-node-1", i) || g.Model != "NVIDIA H200 141GB HBM3e" || g.MemoryMiB != 144384 ||
			rep.Probes[g.UUID] != "ok" {
			t.Errorf("gpu %d = %+v, probe %q", i, g, rep.Probes[g.UUID])
		}
	}
	if len(rep.XIDs) == 0 || rep.XIDs[0].XID != 79 || rep.XIDs[0].UUID != fake.GPUUUID("gpu-node-1", 0) {
		t.Errorf("xids = %+v, want XID 79 on GPU 0 first", rep.XIDs)
	}
}

func TestRunBadFakeProfile(t *testing.T) {
	err := run(context.Background(), config{Watch: time.Millisecond, FakeProfile: "3x0:X", FakeNode: "n"}, &bytes.Buffer{})
	if err == nil || !strings.Contains(err.Error(), `memory "0"`) {
		t.Fatalf("run with a bad profile = %v, want the profile error", err)
	}
}

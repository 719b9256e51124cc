package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var tSummary = time.Date(2026, 12, 1, 5, 30, 0, 0, time.UTC)

func TestSummarizeSkipAll(t *testing.T) {
	out := t.TempDir()
	reason := "no NVIDIA GPU here: nvidia-smi not found in PATH"
	if err := writeResult(out, Result{Name: "preflight", Status: Skip, Reason: reason}); err != nil {
		t.Fatal(err)
	}
	if err := skipAll(out, reason); err != nil {
		t.Fatal(err)
	}
	s, err := summarize(out, tSummary, "h", "commit abc")
	if err != nil {
		t.Fatal(err)
	}
	if s.Overall != Skip || s.Reason != reason || len(s.Checks) != len(checkNames) || s.Time != "2026-12-01T05:30:00Z" {
		t.Fatalf("summary = %+v, want skip for %q over %d checks", s, reason, len(checkNames))
	}
	for _, c := range s.Checks {
		if c.Status != Skip || c.Reason != reason {
			t.Errorf("check %s = %s (%s), want skip with the preflight reason", c.Name, c.Status, c.Reason)
		}
	}
	if err := writeSummary(out, s); err != nil {
		t.Fatal(err)
	}
	var back Summary
	b, _ := os.ReadFile(filepath.Join(out, "summary.json"))
	if err := json.Unmarshal(b, &back); err != nil || back.Overall != Skip {
		t.Fatalf("summary.json = %s, %v", b, err)
	}
	txt, _ := os.ReadFile(filepath.Join(out, "summary.txt"))
	if !strings.HasPrefix(string(txt), "hami-go real-GPU check: SKIP (no NVIDIA GPU here: nvidia-smi not found in PATH)\n") ||
		!strings.Contains(string(txt), "[skip] mps: "+reason) {
		t.Fatalf("summary.txt =\n%s", txt)
	}
}

// A check that wrote no result (the time bound ended the run) fails the summary.
func TestSummarizeFailsAndNotFinished(t *testing.T) {
	out := t.TempDir()
	for _, r := range []Result{
		{Name: "preflight", Status: Pass, Values: []Value{{What: "GPUs listed by nvidia-smi -L", Want: ">= 1", Got: "1", OK: true}}},
		{Name: "discovery", Status: Fail, Reason: "1 of 17 values differ", Values: []Value{{What: "GPU-a memory.total (MiB)", Want: "143771", Got: "143360"}}},
		{Name: "dra-driver", Status: Skip, Reason: "DRA driver not built yet (issue 13)"},
	} {
		if err := writeResult(out, r); err != nil {
			t.Fatal(err)
		}
	}
	s, err := summarize(out, tSummary, "h", "")
	if err != nil {
		t.Fatal(err)
	}
	if want := "failed: discovery, device-plugin, hami-core-glibc, isolation, isolation-2gpu, mps, isolation-mps"; s.Overall != Fail || s.Reason != want {
		t.Fatalf("summary = %s (%s), want %s", s.Overall, s.Reason, want)
	}
	if s.Checks[2].Reason != notFinished || s.Checks[4].Status != Fail || s.Checks[5].Reason != notFinished {
		t.Fatalf("unfinished checks = %+v, %+v, %+v", s.Checks[2], s.Checks[4], s.Checks[5])
	}
	txt := s.text()
	for _, want := range []string{"  DIFF GPU-a memory.total (MiB): want 143771, got 143360\n", "  ok   GPUs listed by nvidia-smi -L: want >= 1, got 1\n",
		"[skip] dra-driver: DRA driver not built yet (issue 13)\n"} {
		if !strings.Contains(txt, want) {
			t.Errorf("summary.txt lacks %q:\n%s", want, txt)
		}
	}
}

func TestSummarizeAllPass(t *testing.T) {
	out := t.TempDir()
	for _, n := range checkNames {
		r := Result{Name: n, Status: Pass}
		if n == "dra-driver" {
			r = Result{Name: n, Status: Skip, Reason: "DRA driver not built yet (issue 13)"}
		}
		if err := writeResult(out, r); err != nil {
			t.Fatal(err)
		}
	}
	if s, _ := summarize(out, tSummary, "h", ""); s.Overall != Pass || s.Reason != "" {
		t.Fatalf("summary = %s (%s), want pass", s.Overall, s.Reason)
	}
}

func TestWriteResultRejectsUnknownName(t *testing.T) {
	if err := writeResult(t.TempDir(), Result{Name: "dra", Status: Skip}); err == nil || !strings.Contains(err.Error(), `"dra"`) {
		t.Fatalf("writeResult(dra) = %v, want an error naming it", err)
	}
}

func TestFinish(t *testing.T) {
	r := Result{}
	r.finish()
	if r.Status != Fail || r.Reason != "no values were compared" {
		t.Fatalf("no values: %s (%s)", r.Status, r.Reason)
	}
	r = Result{Values: []Value{eq("a", "1", "1"), eq("b", "2", "3")}}
	r.finish()
	if r.Status != Fail || r.Reason != `1 of 2 values differ, first b: want "2", got "3"` {
		t.Fatalf("one differs: %s (%s)", r.Status, r.Reason)
	}
}

func TestExistingRaw(t *testing.T) {
	out := outDir(t)
	if err := os.WriteFile(filepath.Join(rawDir(out), "nvidia-smi.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	got := existingRaw(out, []string{"raw/nvidia-smi.txt", "raw/nvml-probe.json", "raw/"})
	if strings.Join(got, " ") != "raw/nvidia-smi.txt raw/" {
		t.Fatalf("existingRaw = %v, want the written file and the folder", got)
	}
}

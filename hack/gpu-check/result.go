package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Status is a check's outcome.
type Status string

// The outcomes of a check.
const (
	// Pass: every compared value matched.
	Pass Status = "pass"
	// Fail: a value differed, a step failed or the check did not finish.
	Fail Status = "fail"
	// Skip: the check could not run here; Reason says why.
	Skip Status = "skip"
)

// Value is one comparison a check made.
type Value struct {
	// What names the compared value, e.g. "GPU-1234… memory.total (MiB)".
	What string `json:"what"`
	// Want is the reference (nvidia-smi, sysfs, the requested limit).
	Want string `json:"want"`
	// Got is what hami-go (or the enforced process) gave.
	Got string `json:"got"`
	// OK is true when Got satisfies Want.
	OK bool `json:"ok"`
	// Note explains a comparison that is not plain equality.
	Note string `json:"note,omitempty"`
}

// Result is one check's record, results/<name>.json in the output folder.
type Result struct {
	// Name is one of checkNames.
	Name string `json:"name"`
	// Status is pass, fail or skip.
	Status Status `json:"status"`
	// Reason says why a check failed or was skipped (empty on pass).
	Reason string `json:"reason,omitempty"`
	// Values are the comparisons made, in order.
	Values []Value `json:"values,omitempty"`
	// Raw lists the raw output files (relative to the output folder) behind the values.
	Raw []string `json:"raw,omitempty"`
	// Isolation is the isolation checks' table row (isolation, isolation-mps).
	Isolation *isolationRow `json:"isolation,omitempty"`
	// IsolationGPUs are isolation-2gpu's table rows, one per GPU.
	IsolationGPUs []isolationRow `json:"isolationGPUs,omitempty"`
}

// checkNames are the checks in the order run.sh runs them and the summary lists them; a name
// without a result at summary time did not finish.
var checkNames = []string{"preflight", "discovery", "device-plugin", "dra-driver", "hami-core-glibc", "isolation", "isolation-2gpu", "mps", "isolation-mps"}

// knownCheck reports whether name is one of checkNames.
func knownCheck(name string) bool {
	for _, n := range checkNames {
		if n == name {
			return true
		}
	}
	return false
}

// eq compares want and got as strings.
func eq(what, want, got string) Value {
	return Value{What: what, Want: want, Got: got, OK: want == got}
}

// finish sets r.Status from r.Values: Fail with the first differing value as Reason when any
// value is not OK or there are none, else Pass.
func (r *Result) finish() {
	if len(r.Values) == 0 {
		r.Status, r.Reason = Fail, "no values were compared"
		return
	}
	var bad []string
	for _, v := range r.Values {
		if !v.OK {
			bad = append(bad, fmt.Sprintf("%s: want %q, got %q", v.What, v.Want, v.Got))
		}
	}
	if len(bad) == 0 {
		r.Status, r.Reason = Pass, ""
		return
	}
	r.Status = Fail
	r.Reason = fmt.Sprintf("%d of %d values differ, first %s", len(bad), len(r.Values), bad[0])
}

// resultsDir is where results are written inside the output folder.
func resultsDir(out string) string { return filepath.Join(out, "results") }

// rawDir is where raw outputs are written inside the output folder.
func rawDir(out string) string { return filepath.Join(out, "raw") }

// writeResult writes r to <out>/results/<name>.json. It fails on an unknown name.
func writeResult(out string, r Result) error {
	if !knownCheck(r.Name) {
		return fmt.Errorf("check name %q is not one of %s", r.Name, strings.Join(checkNames, ", "))
	}
	if err := os.MkdirAll(resultsDir(out), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(resultsDir(out), r.Name+".json"), append(b, '\n'), 0o644)
}

// readResult reads <out>/results/<name>.json; ok is false when it does not exist.
func readResult(out, name string) (r Result, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(resultsDir(out), name+".json"))
	if os.IsNotExist(err) {
		return Result{}, false, nil
	}
	if err != nil {
		return Result{}, false, err
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return Result{}, false, fmt.Errorf("results/%s.json: %w", name, err)
	}
	return r, true, nil
}

// readRaw returns the raw output file <out>/raw/<name> trimmed, or "" when it is missing.
func readRaw(out, name string) string {
	b, err := os.ReadFile(filepath.Join(rawDir(out), name))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// existingRaw keeps the raw entries (paths relative to out) that exist: a check that stopped
// early names only what it wrote.
func existingRaw(out string, raw []string) []string {
	var keep []string
	for _, p := range raw {
		if _, err := os.Stat(filepath.Join(out, p)); err == nil {
			keep = append(keep, p)
		}
	}
	return keep
}

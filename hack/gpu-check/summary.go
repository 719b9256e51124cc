package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is summary.json: the overall outcome and every check's result.
type Summary struct {
	// Overall is fail when any check failed, else pass when any passed, else skip.
	Overall Status `json:"overall"`
	// Reason says which checks failed, or why everything was skipped.
	Reason string `json:"reason,omitempty"`
	// Time is when the summary was written (UTC, RFC 3339).
	Time string `json:"time"`
	// Host is the machine's host name.
	Host string `json:"host"`
	// Build is the stage's BUILD.txt (commit and how the binaries were built).
	Build string `json:"build,omitempty"`
	// Checks are the results in checkNames order.
	Checks []Result `json:"checks"`
}

// notFinished is the reason of a check that wrote no result.
const notFinished = "did not finish: the run's time bound (or a crash) ended it before this check recorded a result (see raw/)"

// summarize reads every check's result from out (a missing one fails as notFinished) and
// computes the overall outcome.
func summarize(out string, now time.Time, host, build string) (Summary, error) {
	s := Summary{Time: now.UTC().Format(time.RFC3339), Host: host, Build: strings.TrimSpace(build)}
	var failed, skipReasons []string
	passed := 0
	for _, n := range checkNames {
		r, ok, err := readResult(out, n)
		if err != nil {
			return Summary{}, err
		}
		if !ok {
			r = Result{Name: n, Status: Fail, Reason: notFinished}
		}
		switch r.Status {
		case Pass:
			passed++
		case Skip:
			skipReasons = append(skipReasons, r.Reason)
		default:
			r.Status = Fail
			failed = append(failed, n)
		}
		s.Checks = append(s.Checks, r)
	}
	switch {
	case len(failed) > 0:
		s.Overall, s.Reason = Fail, "failed: "+strings.Join(failed, ", ")
	case passed > 0:
		s.Overall = Pass
	default:
		s.Overall = Skip
		if len(skipReasons) > 0 {
			s.Reason = skipReasons[0]
		}
	}
	return s, nil
}

// text renders s for people: the outcome, then each check with its values.
func (s Summary) text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "hami-go real-GPU check: %s", strings.ToUpper(string(s.Overall)))
	if s.Reason != "" {
		fmt.Fprintf(&b, " (%s)", s.Reason)
	}
	fmt.Fprintf(&b, "\n%s on %s", s.Time, s.Host)
	if s.Build != "" {
		fmt.Fprintf(&b, "; stage: %s", strings.ReplaceAll(s.Build, "\n", "; "))
	}
	b.WriteString("\n")
	b.WriteString(isolationTable(s.Checks))
	for _, r := range s.Checks {
		fmt.Fprintf(&b, "\n[%s] %s", r.Status, r.Name)
		if r.Reason != "" {
			fmt.Fprintf(&b, ": %s", r.Reason)
		}
		b.WriteString("\n")
		for _, v := range r.Values {
			mark := "ok  "
			if !v.OK {
				mark = "DIFF"
			}
			fmt.Fprintf(&b, "  %s %s: want %s, got %s", mark, v.What, v.Want, v.Got)
			if v.Note != "" {
				fmt.Fprintf(&b, " (%s)", v.Note)
			}
			b.WriteString("\n")
		}
		if len(r.Raw) > 0 {
			fmt.Fprintf(&b, "  raw: %s\n", strings.Join(r.Raw, " "))
		}
	}
	return b.String()
}

// isolationTable renders the isolation checks' rows (a check without one: its status), then which
// HAMi-core was tested (shipped or not) and how it was preloaded; "" when checks holds no
// isolation check.
func isolationTable(checks []Result) string {
	var b strings.Builder
	w := tabwriter.NewWriter(&b, 0, 0, 2, ' ', 0)
	fmt.Fprintf(&b, "\nisolation: one %d MiB / %d%% slice on GPU 0 with pkg/gpuenv's env (isolation-2gpu: GPU 0 %d MiB, GPU 1 %d MiB in one process)\n",
		sliceMemoryMiB, sliceCoresPercent, twoGPUGrants[0].LimitMiB, twoGPUGrants[1].LimitMiB)
	fmt.Fprintln(w, "  check\tlimit MiB\tlargest ok MiB\tfirst failed MiB\terror\tSM share measured\tmemory view")
	rows := 0
	var notes []string
	note := func(n string) {
		for _, x := range notes {
			if x == n {
				return
			}
		}
		notes = append(notes, n)
	}
	for _, r := range checks {
		if r.Name != "isolation" && r.Name != "isolation-2gpu" && r.Name != "isolation-mps" {
			continue
		}
		rows++
		is := r.IsolationGPUs
		if r.Isolation != nil {
			is = append([]isolationRow{*r.Isolation}, is...)
		}
		if len(is) == 0 {
			fmt.Fprintf(w, "  %s\t-\t-\t-\t%s\t-\t-\n", r.Name, r.Status)
			continue
		}
		for _, i := range is {
			fmt.Fprintf(w, "  %s\t%d\t%s\t%s\t%s\t%s\t%s\n", orText(i.Check, r.Name), i.LimitMiB, mibOrNone(i.LargestOKMiB), mibOrNone(i.FirstFailedMiB),
				orText(truncateString(i.Error, 60), "-"), orText(i.SMShare, "-"), orText(i.MemoryView, "-"))
			if i.HAMiCore != "" {
				note("  " + i.HAMiCore)
			}
			if i.Preload != "" {
				note("  preload (" + r.Name + "): " + i.Preload)
			}
		}
	}
	if rows == 0 {
		return ""
	}
	_ = w.Flush()
	for _, n := range notes {
		b.WriteString(n + "\n")
	}
	return b.String()
}

// mibOrNone renders a step size, "none" for 0.
func mibOrNone(mib int) string {
	if mib == 0 {
		return "none"
	}
	return strconv.Itoa(mib)
}

// writeSummary writes summary.json and summary.txt into out.
func writeSummary(out string, s Summary) error {
	j, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(out, "summary.json"), append(j, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "summary.txt"), []byte(s.text()), 0o644)
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
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

package bench_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSchedPerfRunsRefused: hack/schedperf/run.sh refuses a HAMI_GO_SCHEDPERF_RUNS that is not a
// whole number of runs (exit 2, naming the variable and value) before it builds anything.
func TestSchedPerfRunsRefused(t *testing.T) {
	for _, runs := range []string{"0", "two", "-1", "1.5"} {
		cmd := exec.Command("../schedperf/run.sh")
		cmd.Env = append(os.Environ(), "HAMI_GO_SCHEDPERF_RUNS="+runs, "HAMI_GO_SCHEDPERF_OUT="+t.TempDir())
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 2 || !strings.Contains(string(out), `HAMI_GO_SCHEDPERF_RUNS: "`+runs+`"`) {
			t.Errorf("runs %q: %v, output %q; want exit 2 naming HAMI_GO_SCHEDPERF_RUNS and the value", runs, err, out)
		}
	}
}

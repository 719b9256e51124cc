package bench_test

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSettle: settle.sh returns after one 5-second window when the idle threshold is met
// (HAMI_GO_SETTLE_IDLE=0), and when it cannot be (101 %) once HAMI_GO_SETTLE_MAX has passed,
// saying so; it exits 0 both ways.
func TestSettle(t *testing.T) {
	for _, tc := range []struct {
		idle, max, want string
	}{
		{"0", "120", "% idle over 5s (waited 5s)"},
		{"101", "6", "(want 101%); measuring anyway"},
	} {
		cmd := exec.Command("./settle.sh")
		cmd.Env = append(os.Environ(), "HAMI_GO_SETTLE_IDLE="+tc.idle, "HAMI_GO_SETTLE_MAX="+tc.max)
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("idle %s, max %s: %v, output %q; want %q", tc.idle, tc.max, err, out, tc.want)
		}
	}
}

package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The cluster's mode (lib.sh MODE) is HAMI_GO_MODE when set, else the mode up.sh recorded for the
// running cluster ($STATE/mode), else deviceplugin: restart.sh, which relabels the node
// (hami-go.io/mode) when it restarts the kubelet, keeps a DRA-mode cluster in DRA mode (issue 28:
// it relabelled it deviceplugin, and the node's DRA pods lost their driver).
func TestModeFollowsTheRunningCluster(t *testing.T) {
	for _, tc := range []struct {
		name, recorded, env, want string
	}{
		{"fresh state, no HAMI_GO_MODE", "", "", "deviceplugin"},
		{"a DRA cluster, no HAMI_GO_MODE", "dra", "", "dra"},
		{"HAMI_GO_MODE wins", "dra", "deviceplugin", "deviceplugin"},
		{"HAMI_GO_MODE on a fresh state", "", "dra", "dra"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			if tc.recorded != "" {
				if err := os.WriteFile(filepath.Join(state, "mode"), []byte(tc.recorded+"\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			cmd := exec.Command("bash", "-c", `source lib.sh && printf %s "$MODE"`)
			cmd.Env = append(os.Environ(), "HAMI_GO_STATE="+state, "HAMI_GO_MODE="+tc.env)
			out, err := cmd.CombinedOutput()
			if err != nil || strings.TrimSpace(string(out)) != tc.want {
				t.Errorf("MODE = %q, %v; want %q", out, err, tc.want)
			}
		})
	}
}

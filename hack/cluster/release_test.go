package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// up.sh reinstalls over a release left without a deployed revision (an uninstall cut short, as
// an overloaded API server left one during the day-two uninstall test, or a failed first
// install) by uninstalling it first; a deployed release, or none, is left to
// `helm upgrade --install`.
func TestClearUndeployedRelease(t *testing.T) {
	for _, tc := range []struct {
		name, history string // helm history's JSON; "" = no release (helm fails)
		uninstall     bool
	}{
		{"no release", "", false},
		{"deployed", `[{"revision":1,"status":"superseded"},{"revision":2,"status":"deployed"}]`, false},
		{"uninstall cut short", `[{"revision":1,"status":"uninstalling"}]`, true},
		{"first install failed", `[{"revision":1,"status":"failed"}]`, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			calls := filepath.Join(dir, "calls")
			stub := "#!/bin/bash\necho \"$*\" >>" + calls + "\n"
			if tc.history == "" {
				stub += "[[ $1 == history ]] && { echo 'Error: release: not found' >&2; exit 1; }\n"
			} else {
				stub += "[[ $1 == history ]] && echo '" + tc.history + "'\n"
			}
			stub += "exit 0\n"
			if err := os.WriteFile(filepath.Join(dir, "helm"), []byte(stub), 0o755); err != nil {
				t.Fatal(err)
			}
			state := filepath.Join(dir, "state")
			if err := os.MkdirAll(filepath.Join(state, "logs"), 0o755); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("bash", "-c", "source lib.sh && source components.sh && clear_undeployed_release")
			cmd.Env = append(os.Environ(), "PATH="+dir+":"+os.Getenv("PATH"), "HAMI_GO_STATE="+state)
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("clear_undeployed_release: %v\n%s", err, out)
			}
			b, _ := os.ReadFile(calls)
			got := strings.Contains(string(b), "uninstall hami-go -n hami-go-system")
			if got != tc.uninstall {
				t.Errorf("helm calls:\n%s\nuninstall %v, want %v", b, got, tc.uninstall)
			}
		})
	}
}

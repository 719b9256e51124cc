package ray

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
)

// kubeRayWorker is the args[0] KubeRay v1.5 generates for a quick-start worker (pod.go
// generateRayStartCommand/convertParamMap: sorted flags, each as " --k=v ").
const kubeRayWorker = "ulimit -n 65536; ray start  --address=raycluster-kuberay-head-svc.default.svc.cluster.local:6379  --block  --dashboard-agent-listen-port=52365  --memory=4294967296  --metrics-export-port=8080  --num-cpus=2 "

const kubeRayHead = "ulimit -n 65536; ray start --head  --block  --dashboard-agent-listen-port=52365  --dashboard-host=0.0.0.0  --metrics-export-port=8080  --num-cpus=1 "

func TestRewriteStartLine(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	mem := `--resources='{"gpu_memory_mib":'"${HAMI_GO_GPU_MEMORY_MIB:-0}"'}'`
	lab := `--labels=hami-go.io/accelerator-type=${HAMI_GO_GPU_MODEL:-unknown}`
	for _, tc := range []struct {
		name, line string
		n          int
		want       string
		user       string
		warn       string
	}{
		{name: "worker with 1 slice", line: kubeRayWorker, n: 1,
			want: kubeRayWorker[:len(kubeRayWorker)-1] + " --num-gpus=1 " + mem + " " + lab + " "},
		{name: "C33 head without GPU gets 0 and nothing else", line: kubeRayHead, n: 0,
			want: kubeRayHead[:len(kubeRayHead)-1] + " --num-gpus=0 "},
		{name: "C31 user num-gpus kept", line: "ray start --num-gpus=1 --block", n: 2,
			want: "ray start --num-gpus=1 --block " + mem + " " + lab, user: "1"},
		{name: "C31 user fractional num-gpus kept with a warning", line: "ray start --num-gpus 0.5 --block", n: 1,
			want: "ray start --num-gpus 0.5 --block " + mem + " " + lab, user: "0.5", warn: "not a whole number"},
		{name: "user num-gpus above the count warns", line: "ray start --num-gpus=4", n: 1,
			want: "ray start --num-gpus=4 " + mem + " " + lab, user: "4", warn: "CUDA_VISIBLE_DEVICES"},
		{name: "resources merged", line: `ray start --resources='{"custom":2,"a":1.5}' --block`, n: 1,
			want: `ray start --resources='{"a":1.5,"custom":2,"gpu_memory_mib":'"${HAMI_GO_GPU_MEMORY_MIB:-0}"'}' --block --num-gpus=1 ` + lab},
		{name: "existing memory key kept", line: `ray start --num-gpus=1 --resources='{"gpu_memory_mib":8000}'`, n: 1,
			want: `ray start --num-gpus=1 --resources='{"gpu_memory_mib":8000}' ` + lab, user: "1"},
		{name: "labels merged", line: `ray start --num-gpus=1 --labels=zone=a,tier=gold`, n: 1,
			want: `ray start --num-gpus=1 --labels=zone=a,tier=gold,hami-go.io/accelerator-type=${HAMI_GO_GPU_MODEL:-unknown} ` + mem, user: "1"},
		{name: "existing accelerator label kept", line: `ray start --num-gpus=1 --labels="hami-go.io/accelerator-type=H100"`, n: 1,
			want: `ray start --num-gpus=1 --labels="hami-go.io/accelerator-type=H100" ` + mem, user: "1"},
		{name: "only the ray start command is extended", line: "ray start --block && echo done", n: 1,
			want: "ray start --block --num-gpus=1 " + mem + " " + lab + " && echo done"},
		{name: "full path to ray", line: "exec /home/ray/anaconda3/bin/ray start --block", n: 2,
			want: "exec /home/ray/anaconda3/bin/ray start --block --num-gpus=2 " + mem + " " + lab},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := c.RewriteStartLine(tc.line, tc.n)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Found || got.Line != tc.want || got.Changed != (tc.want != tc.line) || got.UserNumGPUs != tc.user {
				t.Fatalf("RewriteStartLine\n got  %q (found %v changed %v user %q)\n want %q (user %q)", got.Line, got.Found, got.Changed, got.UserNumGPUs, tc.want, tc.user)
			}
			if tc.warn == "" && len(got.Warnings) > 0 || tc.warn != "" && (len(got.Warnings) != 1 || !strings.Contains(got.Warnings[0], tc.warn)) {
				t.Fatalf("warnings %q, want one with %q", got.Warnings, tc.warn)
			}
			// Idempotent: a second pass changes nothing.
			again, err := c.RewriteStartLine(got.Line, tc.n)
			if err != nil || again.Changed {
				t.Fatalf("second pass changed %q -> %q (%v)", got.Line, again.Line, err)
			}
		})
	}
}

func TestRewriteStartLineNoRayStart(t *testing.T) {
	c := DefaultConfig("nvidia.com/gpu")
	got, err := c.RewriteStartLine("python serve.py --ray start", 1)
	if err != nil || got.Found || got.Changed || got.Line != "python serve.py --ray start" {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := c.RewriteStartLine("ray start --labels='a=b", 1); err == nil {
		t.Fatal("unterminated quote: no error")
	}
}

func TestRewriteStartLineDisabledExtras(t *testing.T) {
	c := Config{GPUResources: []string{"nvidia.com/gpu"}}
	got, err := c.RewriteStartLine("ray start --block", 2)
	if err != nil || got.Line != "ray start --block --num-gpus=2" {
		t.Fatalf("got %q, %v", got.Line, err)
	}
}

// TestRewrittenLineUnderBash runs the rewritten lines under bash -c (as KubeRay does) with a
// `ray` stand-in that prints its arguments, to check what Ray really receives.
func TestRewrittenLineUnderBash(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed")
	}
	c := DefaultConfig("nvidia.com/gpu")
	run := func(line string, env ...string) []string {
		t.Helper()
		cmd := exec.Command(bash, "-c", `ray() { printf '%s\n' "$@"; }; ulimit() { :; }; `+line)
		cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash: %v", err)
		}
		return strings.Split(strings.TrimSpace(string(out)), "\n")
	}
	got, _ := c.RewriteStartLine(kubeRayWorker, 1)
	args := run(got.Line, "HAMI_GO_GPU_MEMORY_MIB=8000", "HAMI_GO_GPU_MODEL=H100")
	tail := args[len(args)-3:]
	want := []string{"--num-gpus=1", `--resources={"gpu_memory_mib":8000}`, "--labels=hami-go.io/accelerator-type=H100"}
	if !reflect.DeepEqual(tail, want) {
		t.Fatalf("ray received %q, want tail %q", args, want)
	}
	// Without the device plugin's env the values fall back to 0 and "unknown", still valid.
	tail = run(got.Line)[len(args)-3:]
	want = []string{"--num-gpus=1", `--resources={"gpu_memory_mib":0}`, "--labels=hami-go.io/accelerator-type=unknown"}
	if !reflect.DeepEqual(tail, want) {
		t.Fatalf("without env ray received %q, want %q", tail, want)
	}
	merged, _ := c.RewriteStartLine(`ray start --resources='{"x":1}' --labels=zone=a`, 2)
	args = run(merged.Line, "HAMI_GO_GPU_MEMORY_MIB=16000", "HAMI_GO_GPU_MODEL=A100")
	want = []string{"start", `--resources={"x":1,"gpu_memory_mib":16000}`, "--labels=zone=a,hami-go.io/accelerator-type=A100", "--num-gpus=2"}
	if !reflect.DeepEqual(args, want) {
		t.Fatalf("merged: ray received %q, want %q", args, want)
	}
}

func TestSplitWords(t *testing.T) {
	ws, err := splitWords(`a 'b c'"d\"e" f\ g;h&&i # comment`)
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, w := range ws {
		vals = append(vals, w.value)
	}
	want := []string{"a", `b cd"e`, "f g", ";", "h", "&&", "i"}
	if !reflect.DeepEqual(vals, want) {
		t.Fatalf("words %q, want %q", vals, want)
	}
	if _, err := splitWords(`a "b`); err == nil {
		t.Fatal("unterminated double quote: no error")
	}
}

// The default label key must be one Ray accepts from users: Ray refuses custom labels under its
// reserved "ray.io/" prefix and the node never starts (found end to end with KubeRay).
func TestDefaultAcceleratorLabelNotReserved(t *testing.T) {
	got := DefaultConfig("nvidia.com/gpu").AcceleratorLabel
	if got != "hami-go.io/accelerator-type" {
		t.Fatalf("default accelerator label = %q, want hami-go.io/accelerator-type", got)
	}
}

package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func env(kv ...string) func(string) (string, bool) {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestParseRayStartKubeRayLine(t *testing.T) {
	// The line KubeRay v1.5 generates for a worker with nvidia.com/gpu: 1 (after bash word splitting).
	args := strings.Fields(`--address=raycluster-kuberay-head-svc.default.svc.cluster.local:6379 --metrics-export-port=8080 --block --dashboard-agent-listen-port=52365 --num-cpus=2 --memory=1000000000 --num-gpus=1`)
	s, err := parseRayStart(args)
	if err != nil {
		t.Fatal(err)
	}
	if s.Head || !s.Block || *s.NumCPUs != 2 || *s.NumGPUs != 1 || s.Address != "raycluster-kuberay-head-svc.default.svc.cluster.local:6379" {
		t.Fatalf("parsed %+v", s)
	}
}

func TestParseRayStartForms(t *testing.T) {
	s, err := parseRayStart([]string{"--head", "--num-gpus", "2", "--unknown-flag", "--other", "x", "--resources", `{"gpu_memory_mib": 8000, "x": 0.5}`, "--labels=a=b,c.io/d=e"})
	if err != nil {
		t.Fatal(err)
	}
	if !s.Head || *s.NumGPUs != 2 || s.NumCPUs != nil {
		t.Fatalf("parsed %+v", s)
	}
	if s.Resources["gpu_memory_mib"] != 8000 || s.Resources["x"] != 0.5 || len(s.Resources) != 2 {
		t.Fatalf("resources %v", s.Resources)
	}
	if s.Labels["a"] != "b" || s.Labels["c.io/d"] != "e" || len(s.Labels) != 2 {
		t.Fatalf("labels %v", s.Labels)
	}
	s, err = parseRayStart([]string{`--labels={"team": "ml", "zone": "z1"}`, "--num-gpus=3", "--num-gpus=1_0"})
	if err != nil {
		t.Fatal(err)
	}
	if s.Labels["team"] != "ml" || s.Labels["zone"] != "z1" || *s.NumGPUs != 10 {
		t.Fatalf("parsed %+v", s)
	}
}

func TestParseRayStartRejectsLikeRay(t *testing.T) {
	for _, tc := range []struct {
		args  []string
		usage bool // click usage error (exit 2) rather than ValueError (exit 1)
		want  string
	}{
		// case C31: Ray's --num-gpus is an integer; a fraction is a usage error.
		{[]string{"--num-gpus=0.5"}, true, `Invalid value for '--num-gpus': '0.5' is not a valid integer.`},
		{[]string{"--num-gpus", "1.0"}, true, `'1.0' is not a valid integer`},
		{[]string{"--num-gpus=1e3"}, true, `'1e3' is not a valid integer`},
		{[]string{"--num-gpus="}, true, `'' is not a valid integer`},
		{[]string{"--num-cpus=two"}, true, `Invalid value for '--num-cpus': 'two'`},
		{[]string{"--num-gpus"}, true, `Option '--num-gpus' requires an argument.`},
		{[]string{"--head=true"}, true, `Option '--head' does not take a value.`},
		{[]string{"extra"}, true, `unexpected extra argument (extra)`},
		{[]string{"--resources={bad"}, false, "`--resources={bad` is not a valid JSON string"},
		{[]string{`--resources={"GPU": 1}`}, false, "instead of including GPU"},
		{[]string{`--resources={"x": -1}`}, false, `resource "x" has value -1`},
		{[]string{`--resources={"x": "1"}`}, false, `resource "x" has value 1`},
		{[]string{"--labels=a=b=c"}, false, `"a=b=c" is not a key-value pair`},
		{[]string{"--labels=ray.io/accelerator-type=H100"}, false, "cannot start with the prefix `ray.io/`"},
		{[]string{"--labels=-bad=x"}, false, `invalid label key name "-bad"`},
		{[]string{`--labels={"a": 1}`}, false, `the value of "a" is not string type`},
	} {
		_, err := parseRayStart(tc.args)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want it to contain %q", tc.args, err, tc.want)
			continue
		}
		var ue usageError
		if errors.As(err, &ue) != tc.usage {
			t.Errorf("%q: usage error = %v, want %v", tc.args, !tc.usage, tc.usage)
		}
	}
}

func TestClickIntAccepts(t *testing.T) {
	for in, want := range map[string]int{"1": 1, " 2 ": 2, "+3": 3, "-1": -1, "1_000": 1000, "007": 7} {
		got, err := clickInt("--num-gpus", in)
		if err != nil || *got != want {
			t.Errorf("clickInt(%q) = %v, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"1__0", "_1", "1_", "--1", "0x1", "½"} {
		if _, err := clickInt("--num-gpus", in); err == nil {
			t.Errorf("clickInt(%q) accepted", in)
		}
	}
}

func TestResolveNode(t *testing.T) {
	one, two := 1, 2
	for _, tc := range []struct {
		name    string
		start   rayStart
		env     func(string) (string, bool)
		want    string
		wantErr string
	}{
		{"worker with one slice", rayStart{NumGPUs: &one, NumCPUs: &two, Resources: map[string]float64{"gpu_memory_mib": 8000}},
			env("CUDA_VISIBLE_DEVICES", "0", "HAMI_GO_GPU_MODEL", "H100"),
			"ray-standin: registered node=worker GPU=1 CPU=2 accelerator_type:H100=1 gpu_memory_mib=8000 labels=ray.io/accelerator-type=H100", ""},
		// Ray fails when CUDA_VISIBLE_DEVICES lists fewer GPUs than --num-gpus.
		{"more GPUs than visible", rayStart{NumGPUs: &two}, env("CUDA_VISIBLE_DEVICES", "0"), "",
			"Attempting to start raylet with 2 GPU, but CUDA_VISIBLE_DEVICES contains ['0']."},
		{"NoDevFiles means none", rayStart{NumGPUs: &one}, env("CUDA_VISIBLE_DEVICES", "NoDevFiles"), "",
			"Attempting to start raylet with 1 GPU, but CUDA_VISIBLE_DEVICES contains []."},
		{"empty means none", rayStart{NumGPUs: &one}, env("CUDA_VISIBLE_DEVICES", ""), "",
			"contains []."},
		{"unset visible allows any count", rayStart{NumGPUs: &two, NumCPUs: &one}, env(),
			"ray-standin: registered node=worker GPU=2 CPU=1 labels=", ""},
		// case C33: a head with no --num-gpus counts what it sees; with nothing visible that is 0.
		{"head counts visible", rayStart{Head: true, NumCPUs: &one}, env("CUDA_VISIBLE_DEVICES", "GPU-a,GPU-b"),
			"ray-standin: registered node=head GPU=2 CPU=1 labels=", ""},
		{"head without GPUs", rayStart{Head: true, NumCPUs: &one}, env("HAMI_GO_GPU_MODEL", "H100"),
			"ray-standin: registered node=head GPU=0 CPU=1 labels=", ""},
		{"explicit zero", rayStart{NumGPUs: new(int), NumCPUs: &one}, env("CUDA_VISIBLE_DEVICES", "0"),
			"ray-standin: registered node=worker GPU=0 CPU=1 labels=", ""},
		{"override env wins", rayStart{NumGPUs: &one, NumCPUs: &one, Labels: map[string]string{"a": "b"}},
			env("CUDA_VISIBLE_DEVICES", "0,1", "RAY_OVERRIDE_RESOURCES", `{"GPU": 2, "CPU": 4, "gpu_memory_mib": 16000}`, "RAY_OVERRIDE_LABELS", `{"a": "c"}`),
			"ray-standin: registered node=worker GPU=2 CPU=4 gpu_memory_mib=16000 labels=a=c", ""},
		{"override fraction", rayStart{}, env("RAY_OVERRIDE_RESOURCES", `{"GPU": 0.5}`), "", "GPU must be a whole number, got 0.5"},
		{"negative", rayStart{NumGPUs: new(int), NumCPUs: func() *int { n := -1; return &n }()}, env(), "", "Resource quantities must be nonnegative: num_cpus=-1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n, err := resolveNode(tc.start, tc.env, 16)
			if tc.wantErr != "" {
				var ve valueError
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.As(err, &ve) {
					t.Fatalf("error %v, want ValueError containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := n.registerLine(); got != tc.want {
				t.Fatalf("got  %s\nwant %s", got, tc.want)
			}
		})
	}
}

func TestRunRayExitCodes(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  func(string) (string, bool)
		code int
		out  string
	}{
		{[]string{"start", "--num-gpus=1", "--num-cpus=2"}, env("CUDA_VISIBLE_DEVICES", "0", "HAMI_GO_GPU_MEMORY_MIB", "8000"), 0,
			"ray-standin: env CUDA_VISIBLE_DEVICES=0 HAMI_GO_GPU_MODEL= HAMI_GO_GPU_MEMORY_MIB=8000\nray-standin: registered node=worker GPU=1 CPU=2 labels=\n"},
		{[]string{"start", "--num-gpus=0.5"}, env(), 2, "Error: Invalid value for '--num-gpus': '0.5' is not a valid integer."},
		{[]string{"start", "--num-gpus=2"}, env("CUDA_VISIBLE_DEVICES", "0"), 1, "ValueError: Attempting to start raylet with 2 GPU"},
		{[]string{"health-check", "--address", "head-svc:6379"}, env(), 0, ""},
		{[]string{"frobnicate"}, env(), 2, "No such command 'frobnicate'"},
	} {
		var out, errOut bytes.Buffer
		code := runRay(context.Background(), tc.args, tc.env, &out, &errOut, probeAddrs{})
		if code != tc.code || !strings.Contains(out.String()+errOut.String(), tc.out) {
			t.Errorf("%q: exit %d, output %q %q; want exit %d containing %q", tc.args, code, out.String(), errOut.String(), tc.code, tc.out)
		}
	}
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func TestBlockServesKubeRayProbesUntilCancelled(t *testing.T) {
	addrs := probeAddrs{Agent: freeAddr(t), Dashboard: freeAddr(t)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int)
	var out bytes.Buffer
	pr, pw := io.Pipe()
	go func() {
		done <- runRay(ctx, []string{"start", "--head", "--num-cpus=1", "--block"}, env(), pw, io.Discard, addrs)
		pw.Close()
	}()
	// Wait until both listeners are announced.
	buf := make([]byte, 4096)
	for served := 0; served < 2; {
		n, err := pr.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(buf[:n])
		served = strings.Count(out.String(), "serving health on")
	}
	go func() { _, _ = io.Copy(io.Discard, pr) }()
	for _, u := range []string{"http://" + addrs.Agent + pathRayletHealth, "http://" + addrs.Dashboard + pathGCSHealth} {
		c := http.Client{Timeout: 5 * time.Second}
		resp, err := c.Get(u)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(body) != "success" {
			t.Fatalf("%s: %d %q", u, resp.StatusCode, body)
		}
	}
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("exit %d after SIGTERM-like cancel", code)
	}
}

func TestEnvDump(t *testing.T) {
	var out bytes.Buffer
	envDump([]string{"PATH=/bin", "NVIDIA_VISIBLE_DEVICES=GPU-1", "HAMI_GO_GPU_MEMORY_MIB=3000", "CUDA_DEVICE_MEMORY_LIMIT_0=3000m", "HOME=/"}, &out)
	want := "envdump: CUDA_DEVICE_MEMORY_LIMIT_0=3000m\nenvdump: CUDA_VISIBLE_DEVICES=<unset>\nenvdump: HAMI_GO_GPU_MEMORY_MIB=3000\nenvdump: NVIDIA_VISIBLE_DEVICES=GPU-1\nenvdump: done\n"
	if out.String() != want {
		t.Fatalf("got\n%s\nwant\n%s", out.String(), want)
	}
}

func TestDispatch(t *testing.T) {
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if code := run(ctx, []string{"/bin/envdump"}, env(), []string{"CUDA_VISIBLE_DEVICES=1"}, 2, &out, &errOut); code != 0 || out.String() != "envdump: CUDA_VISIBLE_DEVICES=1\nenvdump: done\n" {
		t.Fatalf("envdump: %d %q", code, out.String())
	}
	if code := run(ctx, []string{"workload", "sleep", "0.01"}, env(), nil, 2, &out, &errOut); code != 0 {
		t.Fatalf("sleep: %d", code)
	}
	if code := run(ctx, []string{"workload", "sleep", "-1"}, env(), nil, 2, &out, &errOut); code != 2 {
		t.Fatalf("sleep -1: %d", code)
	}
	if code := run(ctx, []string{"/pause"}, env(), nil, 2, &out, &errOut); code != 0 {
		t.Fatalf("pause: %d", code)
	}
	errOut.Reset()
	if code := run(ctx, []string{"nope"}, env(), nil, 2, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), `unknown program "nope"`) {
		t.Fatalf("unknown: %d %q", code, errOut.String())
	}
}

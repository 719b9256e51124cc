package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"runtime"
	"sort"
	"strconv"
	"strings"
)

// rayVersion is the Ray version the stand-in claims to be: the rayVersion of KubeRay v1.5.0's
// quick-start sample (config/samples/ray-cluster.sample.yaml), whose image is rayproject/ray:2.46.0.
const rayVersion = "2.46.0"

// Environment variables Ray reads at `ray start` (python/ray/_private/ray_constants.py:
// RESOURCES_ENVIRONMENT_VARIABLE, LABELS_ENVIRONMENT_VARIABLE); both hold a JSON object whose
// entries override the command line's. "CPU" and "GPU" entries override --num-cpus/--num-gpus.
const (
	envOverrideResources = "RAY_OVERRIDE_RESOURCES"
	envOverrideLabels    = "RAY_OVERRIDE_LABELS"
	// envGPUModel is set by hami-go's device plugin at Allocate (docs/components.md): the GPU
	// model as a Ray label value, e.g. "H100". The stand-in uses it where Ray would ask NVML.
	envGPUModel = "HAMI_GO_GPU_MODEL"
	// envVisible is the variable Ray's NVIDIA accelerator manager reads for visible GPU ids.
	envVisible = "CUDA_VISIBLE_DEVICES"
)

// Ray's label and resource names (python/ray/_private/ray_constants.py).
const (
	labelAcceleratorType    = "ray.io/accelerator-type"
	reservedLabelPrefix     = "ray.io/"
	resourceAcceleratorType = "accelerator_type:"
)

// usageError is a command-line error that Ray's click CLI reports with usage text and exit 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

// valueError is a ValueError that Ray raises while starting the node (exit 1).
type valueError struct{ msg string }

func (e valueError) Error() string { return e.msg }

// rayStart is a parsed `ray start` command line. Nil pointers are options not given.
type rayStart struct {
	Head      bool
	Block     bool
	Address   string
	NumCPUs   *int
	NumGPUs   *int
	Resources map[string]float64 // from --resources (JSON object of numbers)
	Labels    map[string]string  // from --labels (JSON object or k=v,k2=v2)
}

// rayNode is what the Ray node would register with the cluster.
type rayNode struct {
	Head      bool
	CPU       int
	GPU       int
	Resources map[string]float64 // custom resources, accelerator_type:<model> included
	Labels    map[string]string  // user labels plus Ray's ray.io/accelerator-type
	Visible   []string           // CUDA_VISIBLE_DEVICES as Ray reads it; nil when unset
}

// boolFlags are `ray start` options that take no value (click is_flag options of Ray 2.46).
var boolFlags = map[string]bool{
	"--head": true, "--block": true, "--disable-usage-stats": true, "--no-monitor": true,
	"--verbose": true, "-v": true, "--enable-resource-isolation": true,
}

// parseRayStart parses the arguments after `ray start` as Ray's click CLI does: `--opt=value` or
// `--opt value`; the last of repeated options wins; integer options (--num-cpus, --num-gpus)
// reject anything Python's int() rejects, fractions included; --resources must be a JSON object
// of numbers without CPU or GPU keys; --labels is a JSON object of strings or `k=v,k2=v2`.
// Options the stand-in does not model are accepted and ignored (a value that follows one
// without `=` is taken as its value unless it starts with "-"). Errors are usageError (Ray
// exits 2) or valueError (exit 1), each naming the option and the value.
func parseRayStart(args []string) (rayStart, error) {
	var s rayStart
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return s, usageError{fmt.Sprintf("Got unexpected extra argument (%s)", a)}
		}
		name, val, hasVal := strings.Cut(a, "=")
		if boolFlags[name] {
			if hasVal {
				return s, usageError{fmt.Sprintf("Option '%s' does not take a value.", name)}
			}
			switch name {
			case "--head":
				s.Head = true
			case "--block":
				s.Block = true
			}
			continue
		}
		if !hasVal {
			if !known(name) && (i+1 >= len(args) || strings.HasPrefix(args[i+1], "-")) {
				continue // an unknown flag without a value
			}
			if i+1 >= len(args) {
				return s, usageError{fmt.Sprintf("Option '%s' requires an argument.", name)}
			}
			i++
			val = args[i]
		}
		var err error
		switch name {
		case "--num-cpus":
			s.NumCPUs, err = clickInt(name, val)
		case "--num-gpus":
			s.NumGPUs, err = clickInt(name, val)
		case "--address":
			s.Address = val
		case "--resources":
			s.Resources, err = parseResources(val)
		case "--labels":
			s.Labels, err = parseLabels(val)
		}
		if err != nil {
			return s, err
		}
	}
	return s, nil
}

// known reports whether the stand-in models option name (it then always takes a value).
func known(name string) bool {
	switch name {
	case "--num-cpus", "--num-gpus", "--address", "--resources", "--labels":
		return true
	}
	return false
}

// clickInt parses v as click's INT type does (Python int(): optional sign, digits, underscores
// between digits, surrounding spaces). "0.5", "1.0" and "1e3" are rejected as Ray rejects them.
func clickInt(opt, v string) (*int, error) {
	t := strings.TrimSpace(v)
	digits := strings.TrimLeft(t, "+-")
	ok := len(t)-len(digits) <= 1 && digits != "" && !strings.HasPrefix(digits, "_") &&
		!strings.HasSuffix(digits, "_") && !strings.Contains(digits, "__")
	if ok {
		for _, r := range digits {
			if (r < '0' || r > '9') && r != '_' {
				ok = false
				break
			}
		}
	}
	if !ok {
		return nil, usageError{fmt.Sprintf("Invalid value for '%s': '%s' is not a valid integer.", opt, v)}
	}
	n, err := strconv.Atoi(strings.ReplaceAll(t, "_", ""))
	if err != nil {
		return nil, usageError{fmt.Sprintf("Invalid value for '%s': '%s' is not a valid integer.", opt, v)}
	}
	return &n, nil
}

// parseResources decodes --resources: a JSON object of non-negative numbers, without "CPU" or
// "GPU" (Ray: use --num-cpus and --num-gpus).
func parseResources(v string) (map[string]float64, error) {
	m, err := decodeNumberObject(v)
	if err != nil {
		return nil, valueError{fmt.Sprintf("`--resources=%s` is not a valid JSON string, detail error: %v. "+
			`Valid values look like this: `+"`--resources='{\"CustomResource3\": 1, \"CustomResource2\": 2}'`", v, err)}
	}
	for _, k := range []string{"CPU", "GPU"} {
		if _, ok := m[k]; ok {
			return nil, valueError{fmt.Sprintf("`--resources=%s`: use the --num-cpus and --num-gpus flags instead of including %s in --resources", v, k)}
		}
	}
	return m, nil
}

// decodeNumberObject decodes a JSON object whose values are non-negative finite numbers.
func decodeNumberObject(v string) (map[string]float64, error) {
	var raw map[string]any
	if err := json.Unmarshal([]byte(v), &raw); err != nil {
		return nil, err
	}
	if raw == nil {
		return nil, errors.New("not a JSON object")
	}
	m := make(map[string]float64, len(raw))
	for k, x := range raw {
		f, ok := x.(float64)
		if !ok || f < 0 || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("resource %q has value %v; want a number >= 0", k, x)
		}
		m[k] = f
	}
	return m, nil
}

// parseLabels decodes --labels: a JSON object of string values (Ray 2.46's form) or Ray's later
// `key1=val1,key2=val2` form (surrounding double quotes stripped). Keys must follow Kubernetes
// label syntax and must not use Ray's reserved prefix "ray.io/".
func parseLabels(v string) (map[string]string, error) {
	labels := map[string]string{}
	t := strings.TrimSpace(v)
	if strings.HasPrefix(t, "{") {
		var raw map[string]any
		if err := json.Unmarshal([]byte(t), &raw); err != nil {
			return nil, valueError{fmt.Sprintf("`--labels=%s` is not a valid JSON string, detail error: %v", v, err)}
		}
		for k, x := range raw {
			s, ok := x.(string)
			if !ok {
				return nil, valueError{fmt.Sprintf("`--labels=%s`: the value of %q is not string type", v, k)}
			}
			labels[k] = s
		}
	} else {
		if len(t) > 1 && strings.HasPrefix(t, `"`) && strings.HasSuffix(t, `"`) {
			t = t[1 : len(t)-1]
		}
		if t != "" {
			for _, pair := range strings.Split(t, ",") {
				kv := strings.Split(pair, "=")
				if len(kv) != 2 {
					return nil, valueError{fmt.Sprintf("`--labels=%s` is not a valid string of key-value pairs: %q is not a key-value pair. "+
						"Valid values look like this: `--labels=\"key1=val1,key2=val2\"`", v, pair)}
				}
				labels[strings.TrimSpace(kv[0])] = strings.TrimSpace(kv[1])
			}
		}
	}
	for k, val := range labels {
		if strings.HasPrefix(k, reservedLabelPrefix) {
			return nil, valueError{fmt.Sprintf("Custom label keys `%s` cannot start with the prefix `%s`. This is reserved for Ray defined labels.", k, reservedLabelPrefix)}
		}
		if err := validateLabel(k, val); err != nil {
			return nil, valueError{fmt.Sprintf("`--labels=%s`: %v", v, err)}
		}
	}
	return labels, nil
}

// validateLabel checks Kubernetes label syntax as Ray's validate_node_label_syntax does: an
// optional DNS-subdomain prefix (<= 253 chars) and a name of 1..63 chars [A-Za-z0-9_.-] that
// starts and ends alphanumeric; a value empty or of the name's form.
func validateLabel(k, v string) error {
	name := k
	if prefix, n, ok := strings.Cut(k, "/"); ok {
		if len(prefix) == 0 || len(prefix) > 253 || !dnsSubdomain(prefix) {
			return fmt.Errorf("invalid label key prefix %q: must be a DNS subdomain of at most 253 characters", prefix)
		}
		name = n
	}
	if !labelName(name) {
		return fmt.Errorf("invalid label key name %q: 1..63 characters [A-Za-z0-9_.-], alphanumeric at both ends", name)
	}
	if v != "" && !labelName(v) {
		return fmt.Errorf("invalid label value %q for key %q: at most 63 characters [A-Za-z0-9_.-], alphanumeric at both ends", v, k)
	}
	return nil
}

func alnum(r byte) bool { return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' }

func labelName(s string) bool {
	if len(s) == 0 || len(s) > 63 || !alnum(s[0]) || !alnum(s[len(s)-1]) {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !alnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func dnsSubdomain(s string) bool {
	for _, part := range strings.Split(s, ".") {
		if len(part) == 0 || part[0] == '-' || part[len(part)-1] == '-' {
			return false
		}
		for i := 0; i < len(part); i++ {
			if c := part[i]; !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return false
			}
		}
	}
	return true
}

// visibleGPUs reads CUDA_VISIBLE_DEVICES as Ray's NVIDIA accelerator manager does: nil when
// unset, empty for "" or "NoDevFiles", else the comma-separated entries.
func visibleGPUs(getenv func(string) (string, bool)) []string {
	v, ok := getenv(envVisible)
	if !ok {
		return nil
	}
	if v == "" || v == "NoDevFiles" {
		return []string{}
	}
	return strings.Split(v, ",")
}

// resolveNode computes what the node registers, as Ray's resource spec does: the
// RAY_OVERRIDE_RESOURCES / RAY_OVERRIDE_LABELS objects override the command line; --num-cpus
// defaults to numCPU; without --num-gpus the GPU count is the number of visible GPUs (the
// fake GPUs stand in for detected ones; 0 when CUDA_VISIBLE_DEVICES is unset); an explicit
// count above the number of visible GPUs fails with Ray's ValueError. With GPUs and a model
// in HAMI_GO_GPU_MODEL, Ray's accelerator_type:<model> resource and ray.io/accelerator-type
// label are added.
func resolveNode(s rayStart, getenv func(string) (string, bool), numCPU int) (rayNode, error) {
	n := rayNode{Head: s.Head, CPU: numCPU, Resources: map[string]float64{}, Labels: map[string]string{}}
	for k, v := range s.Resources {
		n.Resources[k] = v
	}
	for k, v := range s.Labels {
		n.Labels[k] = v
	}
	cpus, gpus := s.NumCPUs, s.NumGPUs
	if raw, ok := getenv(envOverrideResources); ok && raw != "" {
		m, err := decodeNumberObject(raw)
		if err != nil {
			return n, valueError{fmt.Sprintf("%s=%s is not a valid JSON object of resources: %v", envOverrideResources, raw, err)}
		}
		for k, v := range m {
			switch k {
			case "CPU", "GPU":
				if v != math.Trunc(v) {
					return n, valueError{fmt.Sprintf("%s=%s: %s must be a whole number, got %v", envOverrideResources, raw, k, v)}
				}
				iv := int(v)
				if k == "CPU" {
					cpus = &iv
				} else {
					gpus = &iv
				}
			default:
				n.Resources[k] = v
			}
		}
	}
	if raw, ok := getenv(envOverrideLabels); ok && raw != "" {
		var m map[string]string
		if err := json.Unmarshal([]byte(raw), &m); err != nil {
			return n, valueError{fmt.Sprintf("%s=%s is not a valid JSON object of string labels: %v", envOverrideLabels, raw, err)}
		}
		for k, v := range m {
			n.Labels[k] = v
		}
	}
	if cpus != nil {
		if *cpus < 0 {
			return n, valueError{fmt.Sprintf("Resource quantities must be nonnegative: num_cpus=%d", *cpus)}
		}
		n.CPU = *cpus
	}
	n.Visible = visibleGPUs(getenv)
	if gpus != nil {
		if *gpus < 0 {
			return n, valueError{fmt.Sprintf("Resource quantities must be nonnegative: num_gpus=%d", *gpus)}
		}
		if n.Visible != nil && *gpus > len(n.Visible) {
			return n, valueError{fmt.Sprintf("Attempting to start raylet with %d GPU, but %s contains %s.", *gpus, envVisible, pyList(n.Visible))}
		}
		n.GPU = *gpus
	} else {
		n.GPU = len(n.Visible)
	}
	if model, _ := getenv(envGPUModel); model != "" && n.GPU > 0 {
		n.Resources[resourceAcceleratorType+model] = 1
		if _, set := n.Labels[labelAcceleratorType]; !set {
			n.Labels[labelAcceleratorType] = model
		}
	}
	return n, nil
}

// pyList formats ids as Python prints a list of strings: ['0', '1'].
func pyList(ids []string) string {
	q := make([]string, len(ids))
	for i, id := range ids {
		q[i] = "'" + id + "'"
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// registerLine is the one line the stand-in prints for a started node:
//
//	ray-standin: registered node=<head|worker> GPU=<int> CPU=<int> [<resource>=<number> ...] labels=<k=v,...>
//
// Custom resources and labels are sorted by name; numbers print as Go's %g (8000, 0.5).
func (n rayNode) registerLine() string {
	var b strings.Builder
	kind := "worker"
	if n.Head {
		kind = "head"
	}
	fmt.Fprintf(&b, "ray-standin: registered node=%s GPU=%d CPU=%d", kind, n.GPU, n.CPU)
	for _, k := range sortedKeys(n.Resources) {
		fmt.Fprintf(&b, " %s=%s", k, strconv.FormatFloat(n.Resources[k], 'g', -1, 64))
	}
	labels := make([]string, 0, len(n.Labels))
	for _, k := range sortedKeys(n.Labels) {
		labels = append(labels, k+"="+n.Labels[k])
	}
	fmt.Fprintf(&b, " labels=%s", strings.Join(labels, ","))
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// runRay implements the `ray` program: start, health-check, stop, status and --version.
// It returns the exit status (0 ok, 1 ValueError, 2 usage error).
// lookup is os.LookupEnv or a test's stand-in.
func runRay(ctx context.Context, args []string, lookup func(string) (string, bool), stdout, stderr io.Writer, probes probeAddrs) int {
	getenv := func(k string) string { v, _ := lookup(k); return v }
	if len(args) == 0 {
		fmt.Fprintln(stderr, "Usage: ray [OPTIONS] COMMAND [ARGS]...")
		return 2
	}
	switch args[0] {
	case "--version":
		fmt.Fprintf(stdout, "ray, version %s (hami-go stand-in)\n", rayVersion)
		return 0
	case "health-check":
		// KubeRay's wait-gcs-ready init container runs `ray health-check --address <head>:<port>`.
		// The stand-in never dials the head (nothing outside the node may be reached): it succeeds.
		return 0
	case "stop", "status":
		fmt.Fprintf(stdout, "ray-standin: %s: nothing to do\n", args[0])
		return 0
	case "start":
	default:
		fmt.Fprintf(stderr, "Usage: ray [OPTIONS] COMMAND [ARGS]...\nTry 'ray --help' for help.\n\nError: No such command '%s'.\n", args[0])
		return 2
	}
	fmt.Fprintf(stdout, "ray-standin: argv ray %s\n", strings.Join(args, " "))
	s, err := parseRayStart(args[1:])
	if err == nil {
		var n rayNode
		n, err = resolveNode(s, lookup, runtime.NumCPU())
		if err == nil {
			v, ok := lookup(envVisible)
			if !ok {
				v = "<unset>"
			}
			fmt.Fprintf(stdout, "ray-standin: env %s=%s %s=%s HAMI_GO_GPU_MEMORY_MIB=%s\n", envVisible, v, envGPUModel, getenv(envGPUModel), getenv("HAMI_GO_GPU_MEMORY_MIB"))
			fmt.Fprintln(stdout, n.registerLine())
			if !s.Block {
				return 0
			}
			if err := serveProbes(ctx, probes, s.Head, stdout); err != nil {
				fmt.Fprintf(stderr, "ray-standin: probe server: %v\n", err)
				return 1
			}
			return 0
		}
	}
	var ue usageError
	if errors.As(err, &ue) {
		fmt.Fprintf(stderr, "Usage: ray start [OPTIONS]\nTry 'ray start --help' for help.\n\nError: %s\n", ue.msg)
		return 2
	}
	fmt.Fprintf(stderr, "Traceback (most recent call last):\n  (ray-standin)\nValueError: %v\n", err)
	return 1
}

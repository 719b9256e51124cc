package ray

import (
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/hami-go/hami-go/pkg/device"
)

// StartLine is the result of RewriteStartLine.
type StartLine struct {
	// Line is the rewritten command line (the input when nothing changed).
	Line string
	// Found reports whether the line runs `ray start`.
	Found bool
	// Changed reports whether Line differs from the input.
	Changed bool
	// UserNumGPUs is the --num-gpus value already in the line ("" when there was none); it is
	// kept as it is (case C31).
	UserNumGPUs string
	// Warnings explain what was left alone and why (a fractional user --num-gpus, a user value
	// above the GPU count, a --resources or --labels value that could not be merged).
	Warnings []string
}

// memoryExpansion is the shell text of the Ray custom resource value: the node component's
// device.EnvGPUMemoryMiB, 0 when unset. It sits outside the single quotes of --resources.
const memoryExpansion = `"${` + device.EnvGPUMemoryMiB + `:-0}"`

// modelExpansion is the shell text of the GPU model label value: device.EnvGPUModel, else
// device.UnknownModel.
const modelExpansion = `${` + device.EnvGPUModel + `:-` + device.UnknownModel + `}`

// RewriteStartLine gives the `ray start` command in line (a bash -c script, as KubeRay writes
// it in args[0] and KUBERAY_GEN_RAY_START_CMD) the flags hami-go owns, leaving the rest of the
// line byte for byte:
//
//   - `--num-gpus=<numGPUs>` when the line has no --num-gpus (always an integer; 0 when the
//     container has no GPU, case C33); a --num-gpus already there is never overwritten (C31).
//   - when numGPUs > 0 and c.MemoryResource is set:
//     `--resources='{"<MemoryResource>":'"${HAMI_GO_GPU_MEMORY_MIB:-0}"'}'`, merged into an
//     existing --resources JSON object (its other keys kept, in lexical order); an existing key of
//     that name is kept.
//   - when numGPUs > 0 and c.AcceleratorLabel is set:
//     `--labels=<AcceleratorLabel>=${HAMI_GO_GPU_MODEL:-unknown}` (Ray's string form
//     "k=v,k2=v2", ray start --labels, Ray >= 2.49), appended to an existing --labels value; an
//     existing key of that name is kept.
//
// A line without `ray start` comes back unchanged with Found false. An unterminated quote is
// an error.
func (c Config) RewriteStartLine(line string, numGPUs int) (StartLine, error) {
	out := StartLine{Line: line}
	words, err := splitWords(line)
	if err != nil {
		return out, err
	}
	first, last := findRayStart(words)
	if first < 0 {
		return out, nil
	}
	out.Found = true
	flags := startFlags(words, first, last)

	var edits []lineEdit
	var add []string
	if f := flags["num-gpus"]; f != nil {
		out.UserNumGPUs = f.value
		out.Warnings = append(out.Warnings, userNumGPUsWarnings(f.value, numGPUs)...)
	} else {
		add = append(add, "--num-gpus="+strconv.Itoa(numGPUs))
	}
	if numGPUs > 0 && c.MemoryResource != "" {
		key, _ := json.Marshal(c.MemoryResource)
		if f := flags["resources"]; f != nil {
			text, ok, warn := mergeResources(f.value, c.MemoryResource, string(key))
			if warn != "" {
				out.Warnings = append(out.Warnings, warn)
			}
			if ok {
				edits = append(edits, lineEdit{f.start, f.end, "--resources=" + text})
			}
		} else {
			add = append(add, "--resources='{"+string(key)+":'"+memoryExpansion+"'}'")
		}
	}
	if numGPUs > 0 && c.AcceleratorLabel != "" {
		if f := flags["labels"]; f != nil {
			text, ok, warn := mergeLabels(f.value, c.AcceleratorLabel)
			if warn != "" {
				out.Warnings = append(out.Warnings, warn)
			}
			if ok {
				edits = append(edits, lineEdit{f.start, f.end, "--labels=" + text})
			}
		} else {
			add = append(add, "--labels="+c.AcceleratorLabel+"="+modelExpansion)
		}
	}
	if len(add) > 0 {
		pos := words[last].end
		edits = append(edits, lineEdit{pos, pos, " " + strings.Join(add, " ")})
	}
	if len(edits) == 0 {
		return out, nil
	}
	s := applyEdits(line, edits)
	out.Line, out.Changed = s, s != line
	return out, nil
}

// findRayStart returns the index of the first `ray start` word pair in words (first) and of the
// last word of that simple command (last); first is -1 when the line has no `ray start`.
func findRayStart(words []word) (first, last int) {
	first = -1
	for i := 0; i+1 < len(words); i++ {
		w := words[i]
		if !w.op && (w.value == "ray" || strings.HasSuffix(w.value, "/ray")) && !words[i+1].op && words[i+1].value == "start" {
			first = i
			break
		}
	}
	if first < 0 {
		return first, -1
	}
	last = first + 1
	for last+1 < len(words) && !words[last+1].op {
		last++
	}
	return first, last
}

// startFlag is one flag hami-go owns in a `ray start` command: the byte span [start, end) of
// its word or words in the line and its value.
type startFlag struct {
	start, end int
	value      string
}

// startFlags finds the --num-gpus, --resources and --labels flags among the `ray start`
// arguments words[first+2 : last+1], in the `--name=value` or `--name value` form, keyed by
// name; a later one replaces an earlier one.
func startFlags(words []word, first, last int) map[string]*startFlag {
	flags := map[string]*startFlag{}
	for k := first + 2; k <= last; k++ {
		name, ok := strings.CutPrefix(words[k].value, "--")
		if !ok {
			continue
		}
		name, val, eq := strings.Cut(name, "=")
		if name != "num-gpus" && name != "resources" && name != "labels" {
			continue
		}
		f := &startFlag{start: words[k].start, end: words[k].end, value: val}
		if !eq && k < last && !strings.HasPrefix(words[k+1].value, "--") {
			k++
			f.end, f.value = words[k].end, words[k].value
		}
		flags[name] = f
	}
	return flags
}

// userNumGPUsWarnings explains a user's --num-gpus value v that Ray rejects or that is more
// than the container's numGPUs; the value is kept either way.
func userNumGPUsWarnings(v string, numGPUs int) []string {
	n, err := strconv.Atoi(v)
	switch {
	case err != nil || n < 0:
		return []string{fmt.Sprintf("ray start --num-gpus=%s is not a whole number of GPUs; Ray rejects it (kept: a value the user set is never overwritten)", v)}
	case n > numGPUs:
		return []string{fmt.Sprintf("ray start --num-gpus=%d is more than the container's %d GPU(s); Ray fails when CUDA_VISIBLE_DEVICES has fewer entries (kept: a value the user set is never overwritten)", n, numGPUs)}
	}
	return nil
}

// lineEdit replaces the byte span [start, end) of a line with text.
type lineEdit struct {
	start, end int
	text       string
}

// applyEdits applies edits to line, from the last span to the first so earlier offsets stay
// valid.
func applyEdits(line string, edits []lineEdit) string {
	sort.Slice(edits, func(i, j int) bool { return edits[i].start > edits[j].start })
	s := line
	for _, e := range edits {
		s = s[:e.start] + e.text + s[e.end:]
	}
	return s
}

// mergeResources adds "key": ${HAMI_GO_GPU_MEMORY_MIB} to the JSON object v (the unquoted
// --resources value). ok is false when v already has the key or is not a JSON object (warn says
// why in the second case).
func mergeResources(v, name, key string) (text string, ok bool, warn string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal([]byte(strings.Trim(v, "'\"` ")), &m); err != nil {
		return "", false, fmt.Sprintf("ray start --resources=%s is not a JSON object; %s not added (%v)", v, name, err)
	}
	if _, has := m[name]; has {
		return "", false, ""
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	b.WriteString("{")
	for _, k := range keys {
		kb, _ := json.Marshal(k)
		b.Write(kb)
		b.WriteString(":")
		b.Write(m[k])
		b.WriteString(",")
	}
	inner := strings.ReplaceAll(b.String(), "'", `'\''`)
	return "'" + inner + key + ":'" + memoryExpansion + "'}'", true, ""
}

// mergeLabels appends label=${HAMI_GO_GPU_MODEL} to v, Ray's "k=v,k2=v2" string form. ok is
// false when v already has the key, or is in the JSON form of older Ray (warn says why).
func mergeLabels(v, label string) (text string, ok bool, warn string) {
	t := strings.TrimSpace(v)
	if strings.HasPrefix(t, "{") {
		return "", false, fmt.Sprintf("ray start --labels=%s is in the JSON form of Ray < 2.49; %s not added", v, label)
	}
	if len(t) > 1 && t[0] == '"' && t[len(t)-1] == '"' {
		t = t[1 : len(t)-1]
	}
	for _, pair := range strings.Split(t, ",") {
		k, _, _ := strings.Cut(pair, "=")
		if strings.TrimSpace(k) == label {
			return "", false, ""
		}
	}
	if strings.TrimSpace(t) == "" {
		return label + "=" + modelExpansion, true, ""
	}
	return shellQuote(t) + "," + label + "=" + modelExpansion, true, ""
}

package gpuview

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/hami-go/hami-go/pkg/device"
)

func itoa(i int) string { return strconv.Itoa(i) }

// WriteTable prints v as `kubectl hami-go` does: one row per GPU (node, status, index, model,
// health, booked/bookable MiB, booked cores percent, sharers/split count), each followed by one
// row per slice (planned or not in the HEALTH column, MiB, percent, and last, in the SLICE
// column, namespace/pod [container]); then each node's problem and errors, one line each. The
// slice's label is the line's last cell, outside the columns (text/tabwriter), so a long pod or
// claim name does not widen them.
func WriteTable(w io.Writer, v *View) error {
	var buf strings.Builder
	tw := tabwriter.NewWriter(&buf, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tSTATUS\tGPU\tMODEL\tHEALTH\tMEMORY(MiB)\tCORES\tSHARERS\tSLICE")
	var notes []string
	for i := range v.Nodes {
		n := &v.Nodes[i]
		if len(n.GPUs) == 0 {
			fmt.Fprintf(tw, "%s\t%s\t-\t-\t-\t-\t-\t-\t\n", n.Name, n.Status)
		}
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			health := g.Health
			if g.Exclusive {
				health += ",exclusive"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\t%d/%d\t%d%%\t%d/%d\t\n", n.Name, n.Status, g.Index, g.Model, health,
				g.BookedMiB, g.CapacityMiB, g.BookedCoresPercent, g.Sharers, n.SplitCount)
			for _, s := range g.Slices {
				fmt.Fprintf(tw, "\t\t\t\t%s\t%d\t%d%%\t\t%s\n", sourceNote(s.Source), s.MemoryMiB, s.CoresPercent, sliceLabel(&s))
			}
		}
		if n.Problem != "" {
			notes = append(notes, n.Name+": "+n.Problem)
		}
		if n.ModeSwitch != "" {
			notes = append(notes, n.Name+": mode switch: "+n.ModeSwitch)
		}
		for _, e := range n.Errors {
			notes = append(notes, n.Name+": "+e)
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	var out strings.Builder
	for _, l := range strings.SplitAfter(buf.String(), "\n") {
		if l != "" {
			out.WriteString(strings.TrimRight(l, " \n") + "\n")
		}
	}
	for _, s := range notes {
		out.WriteString("! " + s + "\n")
	}
	_, err := io.WriteString(w, out.String())
	return err
}

// sliceLabel is "namespace/pod [container]", or for a DRA claim "namespace/pod [claim c, request r]".
func sliceLabel(s *Slice) string {
	if s.Claim != "" {
		pod := s.Pod
		if pod == "" {
			pod = "(not reserved)"
		}
		return s.Namespace + "/" + pod + " [claim " + s.Claim + ", request " + s.Container + "]"
	}
	return s.Namespace + "/" + s.Pod + " [" + containerLabel(s.Container, s.Kind) + "]"
}

func containerLabel(name, kind string) string {
	if kind == "" || kind == string(device.KindApp) {
		return name
	}
	return name + ", " + kind
}

func sourceNote(source string) string {
	if source == "planned" {
		return "planned"
	}
	return ""
}

// describeRequest renders one container's request: `"train" (app): 1 GPU, 8000 MiB, 30% cores`.
func describeRequest(c *device.ContainerRequest) string {
	var b strings.Builder
	b.WriteString(strconv.Quote(c.Name) + " (" + string(c.Kind) + "): " + itoa(c.Count) + " GPU")
	if c.Count != 1 {
		b.WriteString("s")
	}
	switch {
	case c.MemoryMiB > 0:
		b.WriteString(", " + strconv.FormatInt(c.MemoryMiB, 10) + " MiB")
	case c.MemoryPercent > 0:
		b.WriteString(", " + itoa(c.MemoryPercent) + "% memory")
	}
	if c.CoresPercent > 0 {
		b.WriteString(", " + itoa(c.CoresPercent) + "% cores")
	}
	b.WriteString(" per GPU")
	return b.String()
}

// WriteExplanation prints e in one screen: the pod, its request per container, what it got (a
// bound pod) or each node's answer (grouped by reason), and the scheduler's last message.
func WriteExplanation(w io.Writer, e *Explanation) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Pod %s/%s: %s, scheduler %s", e.Namespace, e.Pod, e.Phase, e.SchedulerName)
	if e.Node != "" {
		fmt.Fprintf(&b, ", node %s", e.Node)
	}
	b.WriteString("\n")
	if e.Note != "" {
		fmt.Fprintf(&b, "  %s\n", e.Note)
	}
	if e.RequestError != "" {
		fmt.Fprintf(&b, "Request: %s\n", e.RequestError)
	}
	if len(e.Containers) > 0 {
		b.WriteString("Request:\n")
		for i := range e.Containers {
			fmt.Fprintf(&b, "  %s\n", describeRequest(&e.Containers[i]))
		}
	}
	writeDRAClaims(&b, e.Claims)
	if e.Allocation != nil {
		fmt.Fprintf(&b, "Allocation (%s) on %s:\n", e.AllocationSource, e.Allocation.Node)
		for _, c := range e.Allocation.Containers {
			for _, d := range c.Devices {
				fmt.Fprintf(&b, "  %s: %s  %d MiB  %d%% cores\n", containerLabel(c.Name, string(c.Kind)), d.UUID, d.MemoryMiB, d.CoresPercent)
			}
		}
	}
	if len(e.Nodes) > 0 {
		b.WriteString("Nodes:\n")
		writeNodeFits(&b, e.Nodes)
	}
	for _, p := range e.Problems {
		fmt.Fprintf(&b, "! %s\n", p)
	}
	if ev := e.LastSchedulingEvent; ev != nil {
		fmt.Fprintf(&b, "Last %s (%s", ev.Reason, ev.Time.Format("2006-01-02T15:04:05Z"))
		if ev.Count > 1 {
			fmt.Fprintf(&b, ", %d times", ev.Count)
		}
		fmt.Fprintf(&b, "): %s\n", ev.Message)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeNodeFits prints the nodes that fit on one line, then one line per distinct reason with the
// nodes that give it (so a fleet of identical nodes stays one screen).
func writeNodeFits(b *strings.Builder, nodes []NodeFit) {
	var fit []string
	var reasons []string
	byReason := map[string][]string{}
	for _, n := range nodes {
		if n.Fits {
			fit = append(fit, n.Node)
			continue
		}
		if _, ok := byReason[n.Reason]; !ok {
			reasons = append(reasons, n.Reason)
		}
		byReason[n.Reason] = append(byReason[n.Reason], n.Node)
	}
	if len(fit) > 0 {
		fmt.Fprintf(b, "  fits: %s\n", shortList(fit))
	}
	for _, r := range reasons {
		fmt.Fprintf(b, "  %s: %s\n", shortList(byReason[r]), r)
	}
}

// shortList joins names, eliding past 5 ("a, b, c, d, e and 12 more").
func shortList(names []string) string {
	if len(names) <= 5 {
		return strings.Join(names, ", ")
	}
	return strings.Join(names[:5], ", ") + " and " + itoa(len(names)-5) + " more"
}

// writeDRAClaims prints each claim's requests and, once allocated, its devices.
func writeDRAClaims(b *strings.Builder, claims []DRAClaim) {
	if len(claims) == 0 {
		return
	}
	b.WriteString("Claims (DRA, " + "gpu.hami-go.io):\n")
	for i := range claims {
		c := &claims[i]
		from := ""
		if c.Template != "" {
			from = " from template " + c.Template
		}
		fmt.Fprintf(b, "  %s: claim %s%s\n", c.PodClaimName, c.Claim, from)
		for j := range c.Requests {
			r := &c.Requests[j]
			fmt.Fprintf(b, "    %s\n", describeDRARequest(r))
			for _, s := range r.NotEvaluated {
				fmt.Fprintf(b, "      not evaluated: %s\n", s)
			}
		}
		for _, a := range c.Allocated {
			mem, cores := "whole", "whole"
			if a.MemoryMiB >= 0 {
				mem = itoa(int(a.MemoryMiB)) + " MiB"
			}
			if a.CoresPercent >= 0 {
				cores = itoa(int(a.CoresPercent)) + "%"
			}
			fmt.Fprintf(b, "    allocated %q: %s/%s  %s  %s cores\n", a.Request, a.Pool, a.Device, mem, cores)
		}
	}
}

package webhook

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/hami-go/hami-go/pkg/device"
	"github.com/hami-go/hami-go/pkg/draapi"
)

// The pod annotations of device-plugin mode become CEL selectors on the attributes the DRA
// driver publishes (pkg/draapi) and a matchAttribute constraint. Every value put into a CEL
// expression is first checked to be a plain token (letters, digits and a few separators) and
// then written as a quoted CEL string literal (strconv.Quote: CEL's double-quoted string
// literal takes the same escapes as Go's), so no annotation can change an expression's
// structure.

// celAttr is the CEL path of one of the driver's attributes.
func celAttr(name resourceapi.QualifiedName) string {
	return fmt.Sprintf("device.attributes[%s].%s", strconv.Quote(draapi.DriverName), name)
}

// celCapacity is the CEL path of one of the driver's capacities (a quantity; the API server
// exposes capacities to CEL with DRAConsumableCapacity).
func celCapacity(name resourceapi.QualifiedName) string {
	return fmt.Sprintf("device.capacity[%s].%s", strconv.Quote(draapi.DriverName), name)
}

// plainUUID is what a GPU UUID in use-gpuuuid / nouse-gpuuuid may hold in DRA mode
// (NVML's "GPU-8d2c1a3e-..." form).
var plainUUID = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// nonToken is the RE2 class of what separates model tokens: any character that is not a letter
// or digit (device.ModelTokens splits at the same characters).
const nonToken = `[^\pL\pN]`

// modelRegexp is the RE2 expression that matches a product name containing filter's tokens
// (device.ModelTokens) as a contiguous run of whole tokens, case-insensitively: the rule of
// device.ModelMatches (case C06), written for CEL's string.matches. "" when filter has no token.
func modelRegexp(filter string) string {
	toks := device.ModelTokens(filter)
	if len(toks) == 0 {
		return ""
	}
	for i, t := range toks {
		toks[i] = regexp.QuoteMeta(t)
	}
	return `(?i)(^|` + nonToken + `)` + strings.Join(toks, nonToken+`+`) + `(` + nonToken + `|$)`
}

// modelCEL is the CEL test that the device's productName (the NVML name, what the extender
// matches) is named by filter by whole tokens.
func modelCEL(filter string) string {
	return fmt.Sprintf("%s.matches(%s)", celAttr(draapi.AttrProductName), strconv.Quote(modelRegexp(filter)))
}

// podSelectors returns the CEL expressions every GPU of the pod must satisfy, from the parsed
// annotations (device.ParsePodRequest; validateAnnotations has checked the model entries):
//   - use-gputype: the product name matches one of the entries (whole tokens);
//   - nouse-gputype: it matches none;
//   - use-gpuuuid: the uuid attribute is one of the list; nouse-gpuuuid: none of them.
//
// A UUID that is not a plain token is an error naming the annotation and the value.
func podSelectors(r *device.PodRequest) ([]string, error) {
	var out []string
	if len(r.UseModels) > 0 {
		alts := make([]string, len(r.UseModels))
		for i, f := range r.UseModels {
			alts[i] = modelCEL(f)
		}
		out = append(out, strings.Join(alts, " || "))
	}
	for _, f := range r.AvoidModels {
		out = append(out, "!"+modelCEL(f))
	}
	for _, l := range []struct {
		anno  string
		uuids []string
		neg   bool
	}{{device.AnnoUseGPUUUID, r.UseUUIDs, false}, {device.AnnoNoUseGPUUUID, r.AvoidUUIDs, true}} {
		if len(l.uuids) == 0 {
			continue
		}
		quoted := make([]string, len(l.uuids))
		for i, u := range l.uuids {
			if !plainUUID.MatchString(u) {
				return nil, fmt.Errorf("metadata.annotations[%s]: %q is not a GPU UUID (letters, digits, '-', '_' and '.', e.g. GPU-8d2c1a3e-...)", l.anno, u)
			}
			quoted[i] = strconv.Quote(u)
		}
		expr := fmt.Sprintf("%s in [%s]", celAttr(draapi.AttrUUID), strings.Join(quoted, ", "))
		if l.neg {
			expr = "!(" + expr + ")"
		}
		out = append(out, expr)
	}
	return out, nil
}

// numaConstraint is the constraint of numa-bind: all devices of the claim's request "gpu"
// have the same standard NUMA node attribute (a GPU without NUMA affinity publishes none and
// cannot be part of such a claim).
func numaConstraint() resourceapi.DeviceConstraint {
	attr := resourceapi.FullyQualifiedName(deviceattribute.StandardDeviceAttributeNUMANode)
	return resourceapi.DeviceConstraint{Requests: []string{claimRequestName}, MatchAttribute: &attr}
}

package device

import "strings"

// SplitList splits a comma-separated annotation value such as hami.io/use-gputype
// ("A100, H100-SXM") into its entries, each trimmed of surrounding white space; empty entries
// are dropped, so "" and " , " give nil. It never fails: callers check the entries.
func SplitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

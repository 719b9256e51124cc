package device

import (
	"strings"
	"unicode"
)

// ModelTokens splits a GPU model name into upper-case tokens at every character that is not a
// letter or digit: "NVIDIA A100-SXM4-80GB" -> [NVIDIA A100 SXM4 80GB].
func ModelTokens(model string) []string {
	return strings.FieldsFunc(strings.ToUpper(model), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// ModelMatches reports whether filter names model by whole tokens (case C06): the filter's
// tokens must appear as a contiguous run of the model's tokens. "A10" matches "NVIDIA A10" but
// not "NVIDIA A100-SXM4-80GB"; "H20" does not match "NVIDIA H200"; "A100-SXM4" matches the A100.
// An empty filter matches nothing.
func ModelMatches(filter, model string) bool {
	f, m := ModelTokens(filter), ModelTokens(model)
	if len(f) == 0 {
		return false
	}
	for i := 0; i+len(f) <= len(m); i++ {
		ok := true
		for j := range f {
			if m[i+j] != f[j] {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// ModelAllowed applies allow and deny lists together: the model must match some entry of use
// (when use is not empty) and no entry of avoid.
func ModelAllowed(use, avoid []string, model string) bool {
	for _, f := range avoid {
		if ModelMatches(f, model) {
			return false
		}
	}
	if len(use) == 0 {
		return true
	}
	for _, f := range use {
		if ModelMatches(f, model) {
			return true
		}
	}
	return false
}

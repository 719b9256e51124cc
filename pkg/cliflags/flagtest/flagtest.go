// Package flagtest holds the table helpers the binaries' options tests share.
package flagtest

import (
	"strings"
	"testing"
)

// Env is a getenv reading m (nil = no variables set).
func Env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// BadFlags runs parse on each key of cases, split on white space ("" = no arguments), and
// fails t unless parse returns an error containing the case's value.
func BadFlags(t *testing.T, parse func(args []string) error, cases map[string]string) {
	t.Helper()
	for args, want := range cases {
		err := parse(strings.Fields(args))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", args, err, want)
		}
	}
}

// Fields fails t for each position where got (the parsed fields, in flag order) differs from
// want, and when the lists differ in length.
func Fields(t *testing.T, got, want []any) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%d fields, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("field %d = %v, want %v", i, got[i], want[i])
		}
	}
}

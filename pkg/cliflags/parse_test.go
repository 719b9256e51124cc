package cliflags

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

func TestParseAddsKlogFlagsAndParses(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	name := fs.String("name", "default", "")
	if err := Parse(fs, []string{"--name=x", "-v=4", "--vmodule=foo=2"}); err != nil {
		t.Fatal(err)
	}
	if *name != "x" {
		t.Errorf("--name = %q, want x", *name)
	}
	for f, want := range map[string]string{"v": "4", "vmodule": "foo=2"} {
		got := fs.Lookup(f)
		if got == nil {
			t.Fatalf("--%s not registered", f)
		}
		if got.Value.String() != want {
			t.Errorf("--%s = %q, want %q", f, got.Value.String(), want)
		}
	}
	// Leave klog's global verbosity as other tests of the package expect it.
	if err := Parse(pflag.NewFlagSet("reset", pflag.ContinueOnError), []string{"-v=0", "--vmodule="}); err != nil {
		t.Fatal(err)
	}
}

func TestParseRejectsPositionalArguments(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.String("name", "", "")
	err := Parse(fs, []string{"--name=x", "stray", "more"})
	if err == nil || err.Error() != `unexpected arguments: ["stray" "more"]` {
		t.Fatalf("error %v, want unexpected arguments: [\"stray\" \"more\"]", err)
	}
}

func TestParseReturnsFlagErrors(t *testing.T) {
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := Parse(fs, []string{"--nope"}); err == nil || err.Error() != "unknown flag: --nope" {
		t.Fatalf("error %v, want unknown flag: --nope", err)
	}
	fs = pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	if err := Parse(fs, []string{"-v=lots"}); err == nil || !strings.Contains(err.Error(), `invalid argument "lots"`) {
		t.Fatalf("error %v, want it to name the value \"lots\"", err)
	}
}

// A flag set that already has klog's flags (a main that registered them itself) keeps its own.
func TestParseKeepsFlagsAlreadyRegistered(t *testing.T) {
	gofs := flag.NewFlagSet("mine", flag.ContinueOnError)
	klog.InitFlags(gofs)
	fs := pflag.NewFlagSet("t", pflag.ContinueOnError)
	fs.AddGoFlagSet(gofs)
	own := fs.Lookup("v")
	if err := Parse(fs, []string{"-v=3"}); err != nil {
		t.Fatal(err)
	}
	if fs.Lookup("v") != own || own.Value.String() != "3" {
		t.Errorf("-v: %p %q, want the registered flag %p set to 3", fs.Lookup("v"), fs.Lookup("v").Value, own)
	}
	if err := Parse(pflag.NewFlagSet("reset", pflag.ContinueOnError), []string{"-v=0"}); err != nil {
		t.Fatal(err)
	}
}

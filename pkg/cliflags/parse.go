package cliflags

import (
	"flag"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/klog/v2"
)

// Parse adds klog's flags (-v, --vmodule, --logtostderr, ...: klog.InitFlags of k8s.io/klog/v2)
// to fs, except those fs already has, then parses args (without the program name) and rejects
// positional arguments, which no hami-go binary takes.
//
// Errors: fs.Parse's error for an unknown flag or bad value (with pflag.ContinueOnError; other
// error handlings exit or panic as pflag documents), or `unexpected arguments: ["a" "b"]` naming
// the stray arguments.
func Parse(fs *pflag.FlagSet, args []string) error {
	kfs := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(kfs)
	fs.AddGoFlagSet(kfs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	return nil
}

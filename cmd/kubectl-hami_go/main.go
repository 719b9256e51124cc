// Command kubectl-hami_go is the kubectl plugin `kubectl hami-go`: kubectl runs a binary named
// kubectl-hami_go found on PATH for `kubectl hami-go …` (kubectl's plugin naming: '-' in the
// command is '_' in the file name). It shows, from the API alone, which pod holds which GPU
// slice and why a GPU pod is Pending; the logic is in pkg/gpuview (docs/components.md).
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"
)

func main() {
	cmd := newRootCommand(genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}, nil)
	if err := cmd.Execute(); err != nil {
		os.Exit(1)
	}
}

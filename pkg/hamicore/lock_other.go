//go:build !unix

package hamicore

import "context"

// lockDir does not lock where flock(2) is missing: node agents run on Linux.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }

package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"time"
)

// runSleep sleeps for args[0] seconds (a non-negative number, or "infinity"; no argument means
// forever) or until ctx ends. It returns 2 with a message on a bad argument.
func runSleep(ctx context.Context, args []string, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "infinity" || args[0] == "inf" {
		<-ctx.Done()
		return 0
	}
	secs, err := strconv.ParseFloat(args[0], 64)
	if err != nil || secs < 0 {
		fmt.Fprintf(stderr, "sleep: invalid time interval %q (want seconds >= 0 or infinity)\n", args[0])
		return 2
	}
	t := time.NewTimer(time.Duration(secs * float64(time.Second)))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
	return 0
}

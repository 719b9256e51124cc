package main

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe for one writer goroutine and a polling reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startEnvDump runs the envdump program with a live context in a goroutine; the channel gets its
// exit status.
func startEnvDump(ctx context.Context, pid int, args ...string) (*syncBuffer, *syncBuffer, <-chan int) {
	out, errOut := &syncBuffer{}, &syncBuffer{}
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, append([]string{"/bin/envdump"}, args...), env(), []string{"NVIDIA_VISIBLE_DEVICES=GPU-1"}, pid, out, errOut)
	}()
	return out, errOut, done
}

const wantEnvDump = "envdump: CUDA_VISIBLE_DEVICES=<unset>\nenvdump: NVIDIA_VISIBLE_DEVICES=GPU-1\nenvdump: done\n"

// Under `kubectl exec POD -- envdump` the program is not PID 1: it prints and returns without a
// signal (issue 18: it used to wait for SIGTERM, so the exec never returned).
func TestEnvDumpUnderExecReturns(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		args []string
	}{{"exec", 4242, nil}, {"pid1 --no-wait", 1, []string{"--no-wait"}}} {
		ctx, cancel := context.WithCancel(context.Background())
		out, _, done := startEnvDump(ctx, tc.pid, tc.args...)
		select {
		case code := <-done:
			if code != 0 || out.String() != wantEnvDump {
				t.Errorf("%s: exit %d, output %q", tc.name, code, out.String())
			}
		case <-time.After(10 * time.Second):
			t.Errorf("%s: envdump did not return without a signal (output %q)", tc.name, out.String())
		}
		cancel()
	}
}

// As a container's main process (PID 1, test/e2e's command ["envdump"]) or with --wait it keeps
// running after "envdump: done" until SIGTERM (the context), then exits 0.
func TestEnvDumpAsMainProcessWaits(t *testing.T) {
	for _, tc := range []struct {
		name string
		pid  int
		args []string
	}{{"pid1", 1, nil}, {"--wait", 4242, []string{"--wait"}}} {
		ctx, cancel := context.WithCancel(context.Background())
		out, _, done := startEnvDump(ctx, tc.pid, tc.args...)
		for deadline := time.Now().Add(10 * time.Second); !strings.HasSuffix(out.String(), "envdump: done\n"); {
			if time.Now().After(deadline) {
				t.Fatalf("%s: no done line: %q", tc.name, out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
		select {
		case code := <-done:
			t.Errorf("%s: returned %d before the signal", tc.name, code)
		case <-time.After(100 * time.Millisecond):
		}
		cancel()
		if code := <-done; code != 0 || out.String() != wantEnvDump {
			t.Errorf("%s: exit %d, output %q", tc.name, code, out.String())
		}
	}
}

func TestEnvDumpBadArgs(t *testing.T) {
	_, errOut, done := startEnvDump(context.Background(), 4242, "--forever")
	if code := <-done; code != 2 || !strings.Contains(errOut.String(), `envdump: unexpected arguments ["--forever"]`) {
		t.Fatalf("exit %d, stderr %q", code, errOut.String())
	}
}

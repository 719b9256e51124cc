//go:build unix

package hamicore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a waiting installer retries the lock.
const lockPoll = 20 * time.Millisecond

// lockDir takes an exclusive flock(2) on dir/.lock, waiting (until ctx ends) while another
// installer holds it. flock locks belong to the open file, so goroutines of one process exclude
// each other as processes do.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	p := filepath.Join(dir, lockFile)
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("hamicore: lock %s: %w", p, err)
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, fmt.Errorf("hamicore: lock %s: %w", p, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("hamicore: lock %s: %w", p, ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}

package extender

import (
	"testing"
	"unsafe"
)

// nodeState stays a whole number of 64-byte cache lines (see its last field): a field added or
// removed must resize the padding.
func TestNodeStateIsWholeCacheLines(t *testing.T) {
	if n := unsafe.Sizeof(nodeState{}); n%64 != 0 {
		t.Errorf("nodeState is %d bytes, not a multiple of 64: resize its padding field by %d bytes", n, (64-n%64)%64)
	}
}

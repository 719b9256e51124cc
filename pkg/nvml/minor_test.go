package nvml_test

import (
	"strings"
	"testing"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxh100"

	"github.com/hami-go/hami-go/pkg/nvml"
)

// case C53: a GPU's device node is /dev/nvidia<minor>, and the driver's minor numbers need not
// follow NVML's index order (here reversed, as hack/simgpu numbers them): Discover reads each
// GPU's minor number from nvmlDeviceGetMinorNumber, and a failure there fails discovery naming
// the call and the GPU.
func TestC53DiscoverReadsMinorNumbers(t *testing.T) {
	s := dgxh100.New()
	n := len(s.Devices)
	for i := range s.Devices {
		mockDevice(s, i).Minor = n - 1 - i
	}
	gpus, err := nvml.NewBackend(s, nvml.Options{}).Discover()
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	for i, g := range gpus {
		if g.Index != i || g.Minor != n-1-i {
			t.Errorf("gpu %d: index %d, minor %d; want index %d, minor %d", i, g.Index, g.Minor, i, n-1-i)
		}
	}
	mockDevice(s, 2).GetMinorNumberFunc = func() (int, gonvml.Return) { return 0, gonvml.ERROR_UNKNOWN }
	if _, err := nvml.NewBackend(s, nvml.Options{}).Discover(); err == nil || !strings.Contains(err.Error(), "nvmlDeviceGetMinorNumber") ||
		!strings.Contains(err.Error(), mockDevice(s, 2).UUID) {
		t.Errorf("Discover with a failing nvmlDeviceGetMinorNumber = %v; want an error naming the call and %s", err, mockDevice(s, 2).UUID)
	}
}

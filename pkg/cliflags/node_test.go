package cliflags

import "testing"

func TestFakeProfileSpec(t *testing.T) {
	o := NodeOptions{FakeProfile: "dgxh100", FakeProfileLabel: "hami-go.io/fake-profile"}
	if got := o.FakeProfileSpec(map[string]string{"hami-go.io/fake-profile": "2x24576.NVIDIA-A10"}); got != "2x24576.NVIDIA-A10" {
		t.Fatalf("label: %q", got)
	}
	if got := o.FakeProfileSpec(nil); got != "dgxh100" {
		t.Fatalf("default: %q", got)
	}
}

package nodeagent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeXattrs records lsetxattr calls and answers lgetxattr from what was set.
type fakeXattrs struct {
	set    map[string]string
	calls  int
	setErr error
}

func (f *fakeXattrs) get(path, attr string, dest []byte) (int, error) {
	v, ok := f.set[path+"\x00"+attr]
	if !ok {
		return 0, syscall.ENODATA
	}
	return copy(dest, v+"\x00"), nil
}

func (f *fakeXattrs) setX(path, attr string, data []byte, flags int) error {
	f.calls++
	if f.setErr != nil {
		return f.setErr
	}
	f.set[path+"\x00"+attr] = string(data)
	return nil
}

func (f *fakeXattrs) maker(label string, selinux bool) CacheDirMaker {
	return CacheDirMaker{Label: label, SELinuxEnabled: func() bool { return selinux }, GetXattr: f.get, SetXattr: f.setX}
}

func TestCacheDirMakerLabelsOnSELinuxNodes(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "containers", "uid_ctr")
	x := &fakeXattrs{set: map[string]string{}}
	if err := x.maker(DefaultCacheDirLabel, true).Make(dir); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(dir); err != nil || !st.IsDir() || st.Mode().Perm() != 0o777 {
		t.Fatalf("dir %v %v, want a 0777 directory", st, err)
	}
	if got := x.set[dir+"\x00security.selinux"]; got != "system_u:object_r:container_file_t:s0" {
		t.Errorf("security.selinux = %q", got)
	}
	// Again (a restarted container): the label is there, nothing is written.
	if err := x.maker(DefaultCacheDirLabel, true).Make(dir); err != nil || x.calls != 1 {
		t.Errorf("second Make: %v, %d setxattr calls, want 1", err, x.calls)
	}
}

func TestCacheDirMakerNoOpWithoutSELinuxOrLabel(t *testing.T) {
	for name, m := range map[string]func(*fakeXattrs) CacheDirMaker{
		"no SELinux": func(x *fakeXattrs) CacheDirMaker { return x.maker(DefaultCacheDirLabel, false) },
		"no label":   func(x *fakeXattrs) CacheDirMaker { return x.maker("", true) },
	} {
		t.Run(name, func(t *testing.T) {
			x := &fakeXattrs{set: map[string]string{}, setErr: errors.New("must not be called")}
			dir := filepath.Join(t.TempDir(), "c")
			if err := m(x).Make(dir); err != nil {
				t.Fatal(err)
			}
			if x.calls != 0 {
				t.Errorf("%d setxattr calls", x.calls)
			}
			if st, err := os.Stat(dir); err != nil || st.Mode().Perm() != 0o777 {
				t.Errorf("dir %v %v", st, err)
			}
		})
	}
}

func TestCacheDirMakerLabelErrorSaysWhatToDo(t *testing.T) {
	x := &fakeXattrs{set: map[string]string{}, setErr: syscall.EACCES}
	dir := filepath.Join(t.TempDir(), "c")
	err := x.maker(DefaultCacheDirLabel, true).Make(dir)
	if !errors.Is(err, syscall.EACCES) || !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), "spc_t") {
		t.Errorf("error %v", err)
	}
}

func TestSELinuxEnabledFrom(t *testing.T) {
	d := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(d, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	without := write("fs-without", "nodev\tsysfs\nnodev\tproc\n\text4\n")
	with := write("fs-with", "nodev\tsysfs\nnodev\tselinuxfs\n\txfs\n")
	enforce := write("enforce", "1\n")
	missing := filepath.Join(d, "missing")
	for _, tc := range []struct {
		fs      string
		enforce []string
		want    bool
	}{
		{without, nil, false},
		{without, []string{missing}, false},
		{with, nil, true},
		{missing, []string{missing, enforce}, true},
	} {
		if got := selinuxEnabledFrom(tc.fs, tc.enforce...); got != tc.want {
			t.Errorf("selinuxEnabledFrom(%s, %v) = %v, want %v", filepath.Base(tc.fs), tc.enforce, got, tc.want)
		}
	}
	// This machine: whatever it runs, the detection reads it without error.
	_ = SELinuxEnabled()
}

func TestCacheLabelFlag(t *testing.T) {
	if c := Defaults(); c.HAMiCacheLabel != DefaultCacheDirLabel || c.CacheDirMaker().Label != DefaultCacheDirLabel {
		t.Errorf("default label %q", c.HAMiCacheLabel)
	}
}

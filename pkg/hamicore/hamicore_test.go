package hamicore

import (
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"
)

// fakeLibrary returns a minimal complete ELF64 shared object of this machine's architecture
// whose content is payload: header, payload, .shstrtab, then the section header table at the
// end, so that a truncated copy loses its section headers as a real library would.
func fakeLibrary(t testing.TB, payload string) []byte {
	t.Helper()
	m, ok := machineOf(runtime.GOARCH)
	if !ok {
		m = elf.EM_X86_64
	}
	le := binary.LittleEndian
	strtab := []byte("\x00.shstrtab\x00")
	strOff := 64 + len(payload)
	shOff := strOff + len(strtab)
	b := make([]byte, 64, shOff+2*64)
	copy(b, []byte{0x7f, 'E', 'L', 'F', byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)})
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(m))
	le.PutUint32(b[20:], uint32(elf.EV_CURRENT))
	le.PutUint64(b[40:], uint64(shOff)) // e_shoff
	le.PutUint16(b[52:], 64)            // e_ehsize
	le.PutUint16(b[54:], 56)            // e_phentsize
	le.PutUint16(b[58:], 64)            // e_shentsize
	le.PutUint16(b[60:], 2)             // e_shnum
	le.PutUint16(b[62:], 1)             // e_shstrndx
	b = append(b, payload...)
	b = append(b, strtab...)
	b = append(b, make([]byte, 64)...) // SHT_NULL
	sh := make([]byte, 64)
	le.PutUint32(sh[0:], 1) // name ".shstrtab"
	le.PutUint32(sh[4:], uint32(elf.SHT_STRTAB))
	le.PutUint64(sh[24:], uint64(strOff))
	le.PutUint64(sh[32:], uint64(len(strtab)))
	le.PutUint64(sh[48:], 1)
	b = append(b, sh...)
	if err := checkELF(b); err != nil {
		t.Fatalf("fixture is not a valid library: %v", err)
	}
	return b
}

func sum(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func image(files map[string][]byte) fstest.MapFS {
	m := fstest.MapFS{}
	for n, b := range files {
		m[n] = &fstest.MapFile{Data: b, Mode: 0o755}
	}
	return m
}

const srcV1 = "k8s-vgpu/lib/nvidia/libvgpu.so.v2.10.0"

// dirNames lists dir's entries, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	sort.Strings(out)
	return out
}

func TestInstallFresh(t *testing.T) {
	lib := fakeLibrary(t, "hami-core v2.10.0")
	dir := filepath.Join(t.TempDir(), "vgpu") // created by Install
	in, err := Install(image(map[string][]byte{srcV1: lib}), srcV1, dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Installed{Path: filepath.Join(dir, "libvgpu.so.v2.10.0"), Version: "v2.10.0", SHA256: sum(lib), File: "libvgpu.so.v2.10.0"}
	if in != want {
		t.Fatalf("Install = %+v, want %+v", in, want)
	}
	got, err := os.ReadFile(in.Path)
	if err != nil || string(got) != string(lib) {
		t.Fatalf("installed file: %d bytes, err %v; want the source's %d bytes", len(got), err, len(lib))
	}
	st, _ := os.Stat(in.Path)
	if st.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", st.Mode().Perm())
	}
	if p, _ := os.ReadFile(filepath.Join(dir, "ld.so.preload")); string(p) != "/usr/local/vgpu/libvgpu.so\n" {
		t.Errorf("ld.so.preload = %q", p)
	}
	if got := strings.Join(dirNames(t, dir), " "); got != ".lock current ld.so.preload libvgpu.so.v2.10.0" {
		t.Errorf("directory holds %q (a temporary file left?)", got)
	}
	cur, err := Current(dir)
	if err != nil || cur != want {
		t.Fatalf("Current = %+v, %v; want %+v", cur, err, want)
	}
}

// A source without a version in its name is named by its sha256's first 12 hex digits.
func TestInstallUnversionedSourceIsNamedBySHA256(t *testing.T) {
	lib := fakeLibrary(t, "no version")
	dir := t.TempDir()
	in, err := Install(image(map[string][]byte{"libvgpu.so": lib}), "libvgpu.so", dir)
	if err != nil {
		t.Fatal(err)
	}
	if in.Version != sum(lib)[:12] || in.Path != filepath.Join(dir, "libvgpu.so."+sum(lib)[:12]) {
		t.Errorf("Install = %+v, want version %s", in, sum(lib)[:12])
	}
}

func TestInstallIdempotent(t *testing.T) {
	lib := fakeLibrary(t, "hami-core v2.10.0")
	dir := t.TempDir()
	src := image(map[string][]byte{srcV1: lib})
	first, err := Install(src, srcV1, dir)
	if err != nil {
		t.Fatal(err)
	}
	// The second install writes nothing: every file keeps its inode and modification time.
	old := time.Unix(1_000_000, 0)
	before := map[string]os.FileInfo{}
	for _, n := range []string{first.File, PreloadFile, CurrentFile} {
		p := filepath.Join(dir, n)
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
		before[n], _ = os.Stat(p)
	}
	second, err := Install(src, srcV1, dir)
	if err != nil || second != first {
		t.Fatalf("second Install = %+v, %v; want %+v", second, err, first)
	}
	for n, b := range before {
		a, _ := os.Stat(filepath.Join(dir, n))
		if !os.SameFile(a, b) || !a.ModTime().Equal(old) {
			t.Errorf("%s was rewritten by an identical install", n)
		}
	}
}

// An upgrade installs the new version beside the old one, which a running container may still
// have mounted, and makes it current.
func TestInstallUpgradeKeepsOldVersion(t *testing.T) {
	v1, v2 := fakeLibrary(t, "hami-core v2.10.0"), fakeLibrary(t, "hami-core v2.11.0 (longer)")
	dir := t.TempDir()
	old, err := Install(image(map[string][]byte{srcV1: v1}), srcV1, dir)
	if err != nil {
		t.Fatal(err)
	}
	oldInfo, _ := os.Stat(old.Path)
	const srcV2 = "k8s-vgpu/lib/nvidia/libvgpu.so.v2.11.0"
	in, err := Install(image(map[string][]byte{srcV2: v2}), srcV2, dir)
	if err != nil {
		t.Fatal(err)
	}
	if in.Version != "v2.11.0" || in.SHA256 != sum(v2) {
		t.Errorf("upgrade = %+v", in)
	}
	got, _ := os.ReadFile(old.Path)
	nowInfo, _ := os.Stat(old.Path)
	if string(got) != string(v1) || !os.SameFile(oldInfo, nowInfo) {
		t.Errorf("the old version %s changed", old.Path)
	}
	if cur, err := Current(dir); err != nil || cur != in {
		t.Errorf("Current = %+v, %v; want %+v", cur, err, in)
	}
	if got := strings.Join(dirNames(t, dir), " "); got != ".lock current ld.so.preload libvgpu.so.v2.10.0 libvgpu.so.v2.11.0" {
		t.Errorf("directory holds %q", got)
	}
}

// A rebuilt library under a version name already installed (a re-pushed tag) never replaces
// the installed file: it goes in under "<version>-<sha12>".
func TestInstallSameVersionOtherContent(t *testing.T) {
	a, b := fakeLibrary(t, "build a"), fakeLibrary(t, "build b")
	dir := t.TempDir()
	first, err := Install(image(map[string][]byte{srcV1: a}), srcV1, dir)
	if err != nil {
		t.Fatal(err)
	}
	in, err := Install(image(map[string][]byte{srcV1: b}), srcV1, dir)
	if err != nil {
		t.Fatal(err)
	}
	if want := "v2.10.0-" + sum(b)[:12]; in.Version != want || in.Path != filepath.Join(dir, "libvgpu.so."+want) {
		t.Errorf("Install = %+v, want version %s", in, want)
	}
	if got, _ := os.ReadFile(first.Path); string(got) != string(a) {
		t.Error("the first build was overwritten")
	}
	// Installing build b again finds it under the longer name.
	again, err := Install(image(map[string][]byte{srcV1: b}), srcV1, dir)
	if err != nil || again != in {
		t.Errorf("reinstall = %+v, %v; want %+v", again, err, in)
	}
}

func TestInstallRefusesBadSource(t *testing.T) {
	lib := fakeLibrary(t, strings.Repeat("x", 4096))
	other := fakeLibrary(t, "exe")
	binary.LittleEndian.PutUint16(other[16:], uint16(elf.ET_EXEC))
	for _, tc := range []struct {
		name string
		src  fstest.MapFS
		want string
	}{
		{"truncated", image(map[string][]byte{srcV1: lib[:len(lib)/2]}), "not a complete ELF file"},
		{"one byte short", image(map[string][]byte{srcV1: lib[:len(lib)-1]}), "not a complete ELF file"},
		{"not ELF", image(map[string][]byte{srcV1: []byte("version https://git-lfs.github.com/spec/v1\n")}), "not a complete ELF file"},
		{"empty", image(map[string][]byte{srcV1: {}}), "size 0 bytes"},
		{"executable", image(map[string][]byte{srcV1: other}), "ELF type ET_EXEC, want ET_DYN"},
		{"missing", image(nil), "file does not exist"},
		{"directory", fstest.MapFS{srcV1: &fstest.MapFile{Mode: fs.ModeDir | 0o755}}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Install(tc.src, srcV1, dir)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), srcV1) {
				t.Fatalf("err = %v, want one naming %s and %q", err, srcV1, tc.want)
			}
			if names := dirNames(t, dir); len(names) != 0 {
				t.Errorf("a refused source left %q in the host directory", names)
			}
			if _, err := Current(dir); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("Current after a refused install: %v, want fs.ErrNotExist", err)
			}
		})
	}
}

// A foreign architecture's library would be skipped by ld.so in every container.
func TestInstallRefusesOtherArchitecture(t *testing.T) {
	lib := fakeLibrary(t, "arch")
	binary.LittleEndian.PutUint16(lib[18:], uint16(elf.EM_RISCV))
	_, err := Install(image(map[string][]byte{srcV1: lib}), srcV1, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "ELF machine EM_RISCV") {
		t.Fatalf("err = %v, want the machine named", err)
	}
}

func TestInstallHostDirNotWritable(t *testing.T) {
	lib := fakeLibrary(t, "ro")
	src := image(map[string][]byte{srcV1: lib})
	t.Run("read-only directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Chmod(dir, 0o555); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Chmod(dir, 0o755) })
		if f, err := os.Create(filepath.Join(dir, "probe")); err == nil {
			f.Close()
			t.Skip("permissions do not apply to this user (root): see the next case")
		}
		_, err := Install(src, srcV1, dir)
		if err == nil || !strings.Contains(err.Error(), dir) || !errors.Is(err, fs.ErrPermission) {
			t.Fatalf("err = %v, want a permission error naming %s", err, dir)
		}
	})
	t.Run("parent is a file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "file")
		if err := os.WriteFile(file, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(file, "vgpu")
		_, err := Install(src, srcV1, dir)
		if err == nil || !strings.Contains(err.Error(), "host directory "+dir) || !strings.Contains(err.Error(), "not a directory") {
			t.Fatalf("err = %v, want one naming %s and the cause", err, dir)
		}
	})
	t.Run("relative", func(t *testing.T) {
		if _, err := Install(src, srcV1, "vgpu"); err == nil || !strings.Contains(err.Error(), `host directory "vgpu": not an absolute path`) {
			t.Fatalf("err = %v", err)
		}
	})
	// The versioned name is taken by a directory: never replaced, the error says so.
	t.Run("name taken", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, "libvgpu.so.v2.10.0"), 0o755); err != nil {
			t.Fatal(err)
		}
		_, err := Install(src, srcV1, dir)
		if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "libvgpu.so.v2.10.0")) || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("err = %v", err)
		}
	})
}

// Installers racing on one directory (two versions, several goroutines each) all succeed, leave
// both complete versions and no temporary file, and current names one of them.
func TestInstallConcurrent(t *testing.T) {
	v1, v2 := fakeLibrary(t, "one"), fakeLibrary(t, "two, longer")
	const srcV2 = "k8s-vgpu/lib/nvidia/libvgpu.so.v2.11.0"
	srcs := []struct {
		fs   fstest.MapFS
		name string
	}{{image(map[string][]byte{srcV1: v1}), srcV1}, {image(map[string][]byte{srcV2: v2}), srcV2}}
	dir := t.TempDir()
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := srcs[i%2]
			if _, err := Install(s.fs, s.name, dir); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if got := strings.Join(dirNames(t, dir), " "); got != ".lock current ld.so.preload libvgpu.so.v2.10.0 libvgpu.so.v2.11.0" {
		t.Errorf("directory holds %q", got)
	}
	for n, want := range map[string][]byte{"libvgpu.so.v2.10.0": v1, "libvgpu.so.v2.11.0": v2} {
		if got, _ := os.ReadFile(filepath.Join(dir, n)); string(got) != string(want) {
			t.Errorf("%s: %d bytes, want %d", n, len(got), len(want))
		}
	}
	cur, err := Current(dir)
	if err != nil || (cur.Version != "v2.10.0" && cur.Version != "v2.11.0") {
		t.Errorf("Current = %+v, %v", cur, err)
	}
}

func TestCurrentDetectsChanges(t *testing.T) {
	lib := fakeLibrary(t, "current")
	for _, tc := range []struct {
		name   string
		change func(dir string, in Installed) error
		want   string
	}{
		{"library changed", func(dir string, in Installed) error { return os.WriteFile(in.Path, []byte("tampered"), 0o644) }, "changed on the host after install"},
		{"library removed", func(dir string, in Installed) error { return os.Remove(in.Path) }, "no such file"},
		{"preload removed", func(dir string, in Installed) error { return os.Remove(filepath.Join(dir, PreloadFile)) }, "ld.so.preload: open"},
		{"preload changed", func(dir string, in Installed) error {
			return os.WriteFile(filepath.Join(dir, PreloadFile), []byte("/other.so\n"), 0o644)
		}, `holds "/other.so", want "/usr/local/vgpu/libvgpu.so"`},
		{"current escapes the directory", func(dir string, in Installed) error {
			return os.WriteFile(filepath.Join(dir, CurrentFile), []byte(`{"file":"../x","version":"../x","sha256":"00"}`), 0o644)
		}, "does not name version"},
		{"current garbled", func(dir string, in Installed) error {
			return os.WriteFile(filepath.Join(dir, CurrentFile), []byte("{"), 0o644)
		}, "not what an install wrote"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in, err := Install(image(map[string][]byte{srcV1: lib}), srcV1, dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.change(dir, in); err != nil {
				t.Fatal(err)
			}
			if _, err := Current(dir); err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), dir) {
				t.Fatalf("Current err = %v, want one naming %s and %q", err, dir, tc.want)
			}
		})
	}
	if _, err := Current(t.TempDir()); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Current of an empty directory: %v, want fs.ErrNotExist", err)
	}
}

// Run finds the library in a mounted image, as the node agents call it.
func TestRun(t *testing.T) {
	lib := fakeLibrary(t, "image")
	root := t.TempDir()
	nvidia := filepath.Join(root, "k8s-vgpu", "lib", "nvidia")
	if err := os.MkdirAll(nvidia, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nvidia, "libvgpu.so.v2.10.0"), lib, 0o755); err != nil {
		t.Fatal(err)
	}
	// A symbolic link beside it (as some images carry) is not a second candidate.
	if err := os.Symlink("libvgpu.so.v2.10.0", filepath.Join(nvidia, "libvgpu.so")); err != nil {
		t.Fatal(err)
	}
	host := filepath.Join(t.TempDir(), "usr", "local", "vgpu")
	cfg := Config{SourceDir: root, SourceGlob: DefaultSourceGlob, HostDir: host}
	in, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if in.Path != filepath.Join(host, "libvgpu.so.v2.10.0") || in.SHA256 != sum(lib) {
		t.Errorf("Run = %+v", in)
	}

	// A second regular file is ambiguous.
	if err := os.Remove(filepath.Join(nvidia, "libvgpu.so")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(nvidia, "libvgpu.so.v2.9.0"), lib, 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := Run(context.Background(), cfg); err == nil || !strings.Contains(err.Error(), `2 files match "k8s-vgpu/lib/nvidia/libvgpu.so*"`) {
		t.Errorf("two candidates: err = %v", err)
	}
	// No match names the directory.
	empty := Config{SourceDir: t.TempDir(), SourceGlob: DefaultSourceGlob, HostDir: host}
	if _, err := Run(context.Background(), empty); err == nil || !strings.Contains(err.Error(), "no regular file matches") || !strings.Contains(err.Error(), empty.SourceDir) {
		t.Errorf("no candidate: err = %v", err)
	}
}

func TestRunValidatesConfig(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{SourceDir: "img", SourceGlob: "x", HostDir: "/h"}, `SourceDir "img": not an absolute path`},
		{Config{SourceDir: "/img", SourceGlob: "", HostDir: "/h"}, `SourceGlob "": want a non-empty pattern`},
		{Config{SourceDir: "/img", SourceGlob: "/abs", HostDir: "/h"}, `SourceGlob "/abs"`},
		{Config{SourceDir: "/img", SourceGlob: "[", HostDir: "/h"}, `SourceGlob "[": syntax error in pattern`},
		{Config{SourceDir: "/img", SourceGlob: "x", HostDir: ""}, `HostDir "": not an absolute path`},
	} {
		if _, err := Run(context.Background(), tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
}

// Run gives up when its context ends while another installer holds the lock.
func TestRunHonoursContextWhileLocked(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDir(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	lib := fakeLibrary(t, "locked")
	root := t.TempDir()
	if err := os.WriteFile(filepath.Join(root, "libvgpu.so.v1"), lib, 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = Run(ctx, Config{SourceDir: root, SourceGlob: "libvgpu.so*", HostDir: dir})
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), filepath.Join(dir, ".lock")) {
		t.Fatalf("err = %v, want the deadline, naming the lock", err)
	}
}

// Package hamicore installs HAMi-core's libvgpu.so on a GPU node, for the node agents (the device
// plugin and the DRA driver) to mount into GPU containers (pkg/gpuenv).
//
// Host layout of the install directory (for example /usr/local/vgpu):
//
//	libvgpu.so.<version>  one file per installed version, never rewritten once in place
//	ld.so.preload         "/usr/local/vgpu/libvgpu.so\n": the container path, the same for every
//	                      version; mounted as the container's /etc/ld.so.preload
//	current               JSON {"file","version","sha256"} naming the version installed last
//	.lock                 flock(2) that serializes installers on the node
//
// A container mounts the versioned file (Installed.Path) it was created with as
// /usr/local/vgpu/libvgpu.so, never a path that changes: an upgrade installs a new versioned file
// beside the old one, so a running container keeps the library it started with and never mixes
// two versions among its processes. Old versions are kept: removing the versions no container
// mounts any more is not done here.
//
// Every write is atomic: a temporary file in the same directory, fsync, rename, then fsync of the
// directory, so a crash leaves either the old or the new file, never a partial one.
package hamicore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"strings"

	"github.com/hami-go/hami-go/pkg/gpuenv"
)

// Names in the install directory.
const (
	// LibraryPrefix is the versioned library's name without its version: "libvgpu.so.<version>".
	LibraryPrefix = "libvgpu.so"
	// PreloadFile is the ld.so.preload beside the libraries (gpuenv.HAMiPreloadFile).
	PreloadFile = gpuenv.HAMiPreloadFile
	// CurrentFile names the version installed last (JSON, see Installed).
	CurrentFile = "current"
	// lockFile is flock(2)ed by each installer.
	lockFile = ".lock"
	// tempPrefix starts the temporary files of an atomic write.
	tempPrefix = ".tmp-"
)

// MaxLibraryBytes bounds the source library's size (bytes): HAMi-core's libvgpu.so is a few MiB.
const MaxLibraryBytes = 256 << 20

// shortSum is the number of hex digits of the sha256 that name a version without its own.
const shortSum = 12

// Installed is one installed version of the library.
type Installed struct {
	// Path is the host path of the versioned file, <hostDir>/libvgpu.so.<Version>: the host
	// path a container's /usr/local/vgpu/libvgpu.so is mounted from.
	Path string `json:"-"`
	// Version is the source file's version suffix (libvgpu.so.v2.10.0 -> "v2.10.0"), or the
	// first 12 hex digits of SHA256 when the source name has none. When another file already
	// holds that version's name, "-<12 hex digits>" is appended.
	Version string `json:"version"`
	// SHA256 is the library's sha256, 64 lowercase hex digits.
	SHA256 string `json:"sha256"`
	// File is Path's base name (what CurrentFile records).
	File string `json:"file"`
}

// Install copies the library srcFile of src into hostDir as libvgpu.so.<version> and makes it the
// current version; then it writes hostDir's ld.so.preload (the container path
// /usr/local/vgpu/libvgpu.so) and CurrentFile. hostDir must be an absolute path; it is created
// (0755) when missing. The source must be a regular ELF shared object of this node's
// architecture, at most MaxLibraryBytes.
//
// Install is idempotent: a versioned file that already holds the same sha256 is not written
// again, nor are ld.so.preload and CurrentFile when their content is already right. Installers
// on one node (goroutines or processes) are serialized by a flock on hostDir/.lock.
//
// Errors name the path and the cause; nothing in hostDir changes when the source is invalid.
func Install(src fs.FS, srcFile string, hostDir string) (Installed, error) {
	return install(context.Background(), src, srcFile, hostDir)
}

func install(ctx context.Context, src fs.FS, srcFile, hostDir string) (Installed, error) {
	if !filepath.IsAbs(hostDir) {
		return Installed{}, fmt.Errorf("hamicore: host directory %q: not an absolute path", hostDir)
	}
	data, err := readSource(src, srcFile)
	if err != nil {
		return Installed{}, err
	}
	sum := sha256.Sum256(data)
	in := Installed{SHA256: hex.EncodeToString(sum[:])}
	in.Version = versionOf(path.Base(srcFile), in.SHA256)

	if err := os.MkdirAll(hostDir, 0o755); err != nil {
		return Installed{}, fmt.Errorf("hamicore: host directory %s: %w", hostDir, err)
	}
	unlock, err := lockDir(ctx, hostDir)
	if err != nil {
		return Installed{}, err
	}
	defer unlock()

	write := true
	for attempt := 0; ; attempt++ {
		in.File = LibraryPrefix + "." + in.Version
		in.Path = filepath.Join(hostDir, in.File)
		have, err := fileSHA256(in.Path)
		if errors.Is(err, fs.ErrNotExist) {
			break
		}
		if err != nil {
			return Installed{}, fmt.Errorf("hamicore: installed library %s: %w", in.Path, err)
		}
		if have == in.SHA256 {
			write = false
			break
		}
		// Another library holds this version's name: never replace it (a container may have it
		// mounted, and a CDI spec or a restarted agent names it), install under a longer name.
		if attempt > 0 || strings.HasSuffix(in.Version, in.SHA256[:shortSum]) {
			return Installed{}, fmt.Errorf("hamicore: installed library %s holds sha256 %s, not the source's %s; remove it", in.Path, have, in.SHA256)
		}
		in.Version += "-" + in.SHA256[:shortSum]
	}
	if write {
		if err := writeAtomic(in.Path, data, 0o644); err != nil {
			return Installed{}, err
		}
	}
	if err := writeIfChanged(filepath.Join(hostDir, PreloadFile), []byte(gpuenv.HAMiContainerLibrary+"\n"), 0o644); err != nil {
		return Installed{}, err
	}
	cur, err := json.Marshal(in)
	if err != nil {
		return Installed{}, fmt.Errorf("hamicore: encode %s: %w", CurrentFile, err)
	}
	if err := writeIfChanged(filepath.Join(hostDir, CurrentFile), append(cur, '\n'), 0o644); err != nil {
		return Installed{}, err
	}
	return in, nil
}

// Current reports the version hostDir's CurrentFile names, after checking that its versioned
// file is a regular file with the recorded sha256 and that ld.so.preload names the container
// path of the library. The error wraps fs.ErrNotExist when nothing was installed in hostDir.
func Current(hostDir string) (Installed, error) {
	curPath := filepath.Join(hostDir, CurrentFile)
	raw, err := os.ReadFile(curPath)
	if err != nil {
		return Installed{}, fmt.Errorf("hamicore: %s: %w", curPath, err)
	}
	var in Installed
	if err := json.Unmarshal(raw, &in); err != nil {
		return Installed{}, fmt.Errorf("hamicore: %s: not what an install wrote: %w", curPath, err)
	}
	if in.File != LibraryPrefix+"."+in.Version || strings.ContainsAny(in.Version, "/\\") || in.Version == "" {
		return Installed{}, fmt.Errorf("hamicore: %s: file %q does not name version %q in the directory", curPath, in.File, in.Version)
	}
	in.Path = filepath.Join(hostDir, in.File)
	have, err := fileSHA256(in.Path)
	if err != nil {
		return Installed{}, fmt.Errorf("hamicore: current library %s (named by %s): %w", in.Path, curPath, err)
	}
	if have != in.SHA256 {
		return Installed{}, fmt.Errorf("hamicore: current library %s: sha256 %s, %s recorded %s (changed on the host after install)", in.Path, have, curPath, in.SHA256)
	}
	preload := filepath.Join(hostDir, PreloadFile)
	p, err := os.ReadFile(preload)
	if err != nil {
		return Installed{}, fmt.Errorf("hamicore: %s: %w", preload, err)
	}
	if got := strings.TrimSpace(string(p)); got != gpuenv.HAMiContainerLibrary {
		return Installed{}, fmt.Errorf("hamicore: %s holds %q, want %q", preload, got, gpuenv.HAMiContainerLibrary)
	}
	return in, nil
}

// versionOf is the version suffix of a source named libvgpu.so.<version>, or the sha256's
// first 12 hex digits.
func versionOf(base, sum string) string {
	v, ok := strings.CutPrefix(base, LibraryPrefix+".")
	if !ok || v == "" || v[0] == '.' || v[0] == '-' {
		return sum[:shortSum]
	}
	for _, r := range v {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == '_' || r == '+') {
			return sum[:shortSum]
		}
	}
	return v
}

// readSource reads and checks the source library.
func readSource(src fs.FS, name string) ([]byte, error) {
	if !fs.ValidPath(name) {
		return nil, fmt.Errorf("hamicore: source %q: not a valid path in the source (slash-separated, relative)", name)
	}
	f, err := src.Open(name)
	if err != nil {
		return nil, fmt.Errorf("hamicore: source %s: %w", name, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("hamicore: source %s: %w", name, err)
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("hamicore: source %s: not a regular file (%s)", name, st.Mode())
	}
	if st.Size() == 0 || st.Size() > MaxLibraryBytes {
		return nil, fmt.Errorf("hamicore: source %s: size %d bytes, want 1..%d", name, st.Size(), MaxLibraryBytes)
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxLibraryBytes+1))
	if err != nil {
		return nil, fmt.Errorf("hamicore: source %s: %w", name, err)
	}
	if int64(len(data)) != st.Size() {
		return nil, fmt.Errorf("hamicore: source %s: read %d bytes of %d (changed while read)", name, len(data), st.Size())
	}
	if err := checkELF(data); err != nil {
		return nil, fmt.Errorf("hamicore: source %s: %w", name, err)
	}
	return data, nil
}

// machineOf is the ELF machine of a library built for goarch; false when not checked.
func machineOf(goarch string) (elf.Machine, bool) {
	switch goarch {
	case "amd64":
		return elf.EM_X86_64, true
	case "arm64":
		return elf.EM_AARCH64, true
	case "ppc64le":
		return elf.EM_PPC64, true
	}
	return 0, false
}

// checkELF accepts a complete ELF shared object (ET_DYN) of this node's architecture: glibc
// skips a preloaded library it cannot load without failing the process, so a truncated or
// foreign file would leave GPU containers without limits.
func checkELF(data []byte) error {
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("not a complete ELF file: %w", err)
	}
	defer f.Close()
	if f.Type != elf.ET_DYN {
		return fmt.Errorf("ELF type %s, want %s (a shared library)", f.Type, elf.ET_DYN)
	}
	if m, ok := machineOf(runtime.GOARCH); ok && f.Machine != m {
		return fmt.Errorf("ELF machine %s, want %s (GOARCH %s)", f.Machine, m, runtime.GOARCH)
	}
	size := uint64(len(data))
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOBITS && s.Type != elf.SHT_NULL && (s.Offset > size || s.Size > size-s.Offset) {
			return fmt.Errorf("section %q at %d+%d bytes lies past the end of the file (%d bytes): truncated", s.Name, s.Offset, s.Size, size)
		}
	}
	for i, p := range f.Progs {
		if p.Off > size || p.Filesz > size-p.Off {
			return fmt.Errorf("program header %d at %d+%d bytes lies past the end of the file (%d bytes): truncated", i, p.Off, p.Filesz, size)
		}
	}
	return nil
}

// fileSHA256 hashes a regular file; the error wraps fs.ErrNotExist when it is missing.
func fileSHA256(p string) (string, error) {
	f, err := os.Open(p)
	if err != nil {
		return "", err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !st.Mode().IsRegular() {
		return "", fmt.Errorf("not a regular file (%s)", st.Mode())
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// writeIfChanged writes data to p atomically unless p already holds exactly data.
func writeIfChanged(p string, data []byte, mode os.FileMode) error {
	if have, err := os.ReadFile(p); err == nil && bytes.Equal(have, data) {
		return nil
	}
	return writeAtomic(p, data, mode)
}

// writeAtomic replaces p with data: a temporary file in p's directory, fsync, rename over p,
// fsync of the directory. A reader (or a container's bind mount) of the old p keeps the old
// inode.
func writeAtomic(p string, data []byte, mode os.FileMode) (err error) {
	dir := filepath.Dir(p)
	tmp, err := os.CreateTemp(dir, tempPrefix+filepath.Base(p)+"-*")
	if err != nil {
		return fmt.Errorf("hamicore: write %s: %w", p, err)
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return fmt.Errorf("hamicore: write %s: %w", tmp.Name(), err)
	}
	if err = tmp.Chmod(mode); err != nil {
		return fmt.Errorf("hamicore: chmod %s: %w", tmp.Name(), err)
	}
	if err = tmp.Sync(); err != nil {
		return fmt.Errorf("hamicore: fsync %s: %w", tmp.Name(), err)
	}
	if err = tmp.Close(); err != nil {
		return fmt.Errorf("hamicore: close %s: %w", tmp.Name(), err)
	}
	if err = os.Rename(tmp.Name(), p); err != nil {
		return fmt.Errorf("hamicore: rename %s to %s: %w", tmp.Name(), p, err)
	}
	return syncDir(dir)
}

// syncDir fsyncs a directory, making a rename in it durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("hamicore: fsync directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("hamicore: fsync directory %s: %w", dir, err)
	}
	return nil
}

package nodeagent

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"
	"sync"
)

// DefaultCacheDirLabel is the SELinux context the GPU containers' HAMi-core cache directories get
// on SELinux nodes (--hami-core-cache-selinux-label): container_file_t, the type a container
// (container_t) may create files in. The host directory the agent creates is otherwise usr_t or
// var_t, where HAMi-core's open(O_CREAT) of its cache file is denied and it exits every CUDA
// process. The directory reaches the container as a CDI or NRI bind mount, which the runtime
// does not relabel (the OCI "z" mount option is a CRI and Docker option that runc ignores), so
// the agent labels it when it creates it.
const DefaultCacheDirLabel = "system_u:object_r:container_file_t:s0"

// xattrSELinux is the extended attribute that holds a file's SELinux context.
const xattrSELinux = "security.selinux"

// CacheDirMaker creates the HAMi-core cache directory of a GPU container (device-plugin mode) or
// claim (DRA mode): gpuenv.Edits.Dirs.
type CacheDirMaker struct {
	// Label is the SELinux context set on each directory when SELinux is enabled on the node;
	// "" never labels.
	Label string
	// SELinuxEnabled reports whether the node runs SELinux; nil = SELinuxEnabled.
	SELinuxEnabled func() bool
	// GetXattr and SetXattr read and write a path's extended attribute without following a
	// final symbolic link; nil = lgetxattr(2) and lsetxattr(2).
	GetXattr func(path, attr string, dest []byte) (int, error)
	SetXattr func(path, attr string, data []byte, flags int) error
}

// CacheDirMaker is the maker of c's cache directories (--hami-core-cache-selinux-label).
func (c *Config) CacheDirMaker() CacheDirMaker {
	return CacheDirMaker{Label: c.HAMiCacheLabel}
}

// Make creates dir (MkdirAll) world-writable (chmod 0777: the container's processes may run as
// any user, as in HAMi) and, on an SELinux node, gives it m.Label unless it has it already.
// Labelling needs the agent to be allowed to relabel (the chart's devicePlugin.seLinuxOptions
// type spc_t, or privileged): the error says so. Elsewhere it is a no-op.
func (m CacheDirMaker) Make(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		return err
	}
	if m.Label == "" {
		return nil
	}
	enabled := m.SELinuxEnabled
	if enabled == nil {
		enabled = SELinuxEnabled
	}
	if !enabled() {
		return nil
	}
	get, set := m.GetXattr, m.SetXattr
	if get == nil {
		get = lgetxattr
	}
	if set == nil {
		set = lsetxattr
	}
	buf := make([]byte, 256)
	if n, err := get(dir, xattrSELinux, buf); err == nil && n <= len(buf) && strings.TrimRight(string(buf[:n]), "\x00") == m.Label {
		return nil
	}
	if err := set(dir, xattrSELinux, []byte(m.Label), 0); err != nil {
		return fmt.Errorf("set SELinux context %s on %s (SELinux is enabled on the node; the agent must be allowed to relabel: run it as spc_t, chart value devicePlugin.seLinuxOptions, or label the directory's parent and set --hami-core-cache-selinux-label=\"\"): %w", m.Label, dir, err)
	}
	return nil
}

// SELinuxEnabled reports whether the node runs SELinux, once per process: selinuxfs is
// registered with the kernel (/proc/filesystems, which is not namespaced: the kernel registers it
// only when SELinux is enabled at boot), or /sys/fs/selinux/enforce exists in the agent's or the
// host's (/host) view.
var SELinuxEnabled = sync.OnceValue(func() bool {
	return selinuxEnabledFrom("/proc/filesystems", "/sys/fs/selinux/enforce", "/host/sys/fs/selinux/enforce")
})

// selinuxEnabledFrom is SELinuxEnabled reading the given filesystems list and enforce files.
func selinuxEnabledFrom(filesystems string, enforce ...string) bool {
	if raw, err := os.ReadFile(filesystems); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(raw))
		for sc.Scan() {
			f := strings.Fields(sc.Text())
			if len(f) > 0 && f[len(f)-1] == "selinuxfs" {
				return true
			}
		}
	}
	for _, p := range enforce {
		if _, err := os.Stat(p); err == nil {
			return true
		}
	}
	return false
}

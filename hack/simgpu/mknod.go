package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Device numbers of the simulated nodes. 195 is the NVIDIA major
// (Documentation/admin-guide/devices.txt); nvidiactl is 195:255. nvidia-uvm's major is dynamic
// on real hosts: the simulation fixes 510:0. nvidia-uvm-tools is left out on purpose (real hosts
// may lack it).
const (
	nvidiaMajor   = 195
	nvidiactlMin  = 255
	uvmMajor      = 510
	nodeMode      = 0o666
	nodesDirMode  = 0o755
	uvmNodeName   = "nvidia-uvm"
	ctlNodeName   = "nvidiactl"
	gpuNodePrefix = "nvidia"
)

// MakeNodes creates root/dev/nvidiactl, root/dev/nvidia-uvm and root/dev/nvidia<minor> for each
// minor, as character devices with mode 0666, replacing nodes already there. mknod needs root
// (CAP_MKNOD); without it the error says so.
func MakeNodes(root string, minors []int) error {
	if root == "" {
		return fmt.Errorf("dev root is empty")
	}
	dir := filepath.Join(root, "dev")
	if err := os.MkdirAll(dir, nodesDirMode); err != nil {
		return err
	}
	type node struct {
		name         string
		major, minor uint32
	}
	nodes := []node{{ctlNodeName, nvidiaMajor, nvidiactlMin}, {uvmNodeName, uvmMajor, 0}}
	for _, m := range minors {
		nodes = append(nodes, node{gpuNodePrefix + strconv.Itoa(m), nvidiaMajor, uint32(m)})
	}
	for _, n := range nodes {
		path := filepath.Join(dir, n.name)
		if err := os.Remove(path); err != nil && !os.IsNotExist(err) {
			return err
		}
		if err := unix.Mknod(path, unix.S_IFCHR|nodeMode, int(unix.Mkdev(n.major, n.minor))); err != nil {
			if err == unix.EPERM {
				return fmt.Errorf("mknod %s: %w (creating device nodes needs root / CAP_MKNOD)", path, err)
			}
			return fmt.Errorf("mknod %s: %w", path, err)
		}
		if err := os.Chmod(path, nodeMode); err != nil { // the umask applied to mknod
			return err
		}
	}
	return nil
}

package nodeagent

import "golang.org/x/sys/unix"

func lgetxattr(path, attr string, dest []byte) (int, error) { return unix.Lgetxattr(path, attr, dest) }

func lsetxattr(path, attr string, data []byte, flags int) error {
	return unix.Lsetxattr(path, attr, data, flags)
}

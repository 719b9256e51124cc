//go:build !linux

package nodeagent

import "errors"

func lgetxattr(string, string, []byte) (int, error) { return 0, errors.ErrUnsupported }

func lsetxattr(string, string, []byte, int) error { return errors.ErrUnsupported }

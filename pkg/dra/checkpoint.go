package dra

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// CheckpointName is the checkpoint's file name in the plugin data directory.
const CheckpointName = "prepared-claims.json"

// checkpointVersion is the checkpoint format; another version is refused.
const checkpointVersion = 1

// Prepared is one prepared claim as the checkpoint keeps it: enough to answer a repeated
// Prepare and to Unprepare by UID after a restart.
type Prepared struct {
	Namespace string    `json:"namespace"`
	Name      string    `json:"name"`
	UID       types.UID `json:"uid"`
	// Pod is the first pod in the claim's status.reservedFor at prepare time ("" = none), for
	// metrics.
	Pod    string  `json:"pod,omitempty"`
	Grants []Grant `json:"grants"`
}

type checkpointFile struct {
	Version int                    `json:"version"`
	Claims  map[types.UID]Prepared `json:"claims"`
}

// loadCheckpoint reads the checkpoint at path; a missing file is an empty checkpoint.
func loadCheckpoint(path string) (map[types.UID]Prepared, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[types.UID]Prepared{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read the checkpoint %s: %w", path, err)
	}
	var f checkpointFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("checkpoint %s is not valid JSON: %w", path, err)
	}
	if f.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s: version %d is not %d", path, f.Version, checkpointVersion)
	}
	if f.Claims == nil {
		f.Claims = map[types.UID]Prepared{}
	}
	return f.Claims, nil
}

// saveCheckpoint writes claims to path atomically: a temporary file in the same directory
// renamed over the old one, so a driver or kubelet restart finds the old or the new
// checkpoint, never a torn one. It does not fsync: the checkpoint only has to outlive the
// driver's process (the kubelet's restart and RollingUpdate cases of kubeletplugin.DRAPlugin);
// after a host crash the containers it describes are gone too, the CDI directory is usually a
// tmpfs, and the kubelet prepares again (an fsync cost 5-25 ms per Prepare on a busy disk,
// against the 1 ms budget of issue 13).
func saveCheckpoint(path string, claims map[types.UID]Prepared) error {
	b, err := json.Marshal(checkpointFile{Version: checkpointVersion, Claims: claims})
	if err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, ".checkpoint-*.tmp")
	if err != nil {
		return fmt.Errorf("write the checkpoint in %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write the checkpoint %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace the checkpoint %s: %w", path, err)
	}
	return nil
}

package state

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"time"

	"github.com/google/renameio/v2"
)

// Fence is the ingress fence record, kept in its own file beside the state
// file (FencePath). An ingress request that got no clear answer may still
// be applied by Feldera up to its ingress timeout later, after anything
// newer; the connector sends nothing before Until. Running is set while a
// process runs and cleared when it returns: a record still marked running
// belongs to a process that died (SIGKILL, OOM, a crash point), which may
// have had such a request outstanding, so the next one fences in full.
type Fence struct {
	Version int       `json:"version"`
	Running bool      `json:"running"`
	PID     int       `json:"pid,omitempty"`
	Until   time.Time `json:"until,omitempty"`
}

// FencePath is the fence file that goes with a state file.
func FencePath(stateFile string) string { return stateFile + ".fence" }

// LoadFence reads a fence file: ErrNotExist when there is none, an error
// naming the file when it cannot be used.
func LoadFence(path string) (*Fence, error) {
	b, err := readFile(path, "fence file")
	if err != nil {
		return nil, err
	}
	var f Fence
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("fence file %s is corrupt: %v", path, err)
	}
	if f.Version != Version {
		return nil, fmt.Errorf("fence file %s has version %d, this pgfeldera reads version %d", path, f.Version, Version)
	}
	return &f, nil
}

// SaveFence writes a fence file atomically and durably.
func SaveFence(path string, f *Fence) error {
	f.Version = Version
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	if err := renameio.WriteFile(path, append(b, '\n'), 0o600, renameio.WithTempDir(filepath.Dir(path))); err != nil {
		return fmt.Errorf("fence file %s: %w", path, err)
	}
	return syncDir(filepath.Dir(path))
}

package remediate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"time"
)

// State is what the sidecar keeps on the host next to its drop-in, so that
// it outlives the pod: what every file it changed held before (uninstall puts
// those bytes back), what it wrote, and since when the running containerd
// could have loaded the handler.
type State struct {
	Files []FileRecord `json:"files,omitempty"`
	// Loaded is the fingerprint of the handler's effective settings (as
	// containerd's config dump shows them) and when files holding them were
	// last put in place: a containerd that started later has loaded them.
	// A byte-identical rewrite does not change the fingerprint, so it does
	// not trigger a restart.
	Loaded *LoadedRecord `json:"loaded,omitempty"`
	// Rejected is the fingerprint of a candidate that containerd did not
	// come back with after a restart; it is not written again until the
	// inputs change.
	Rejected string `json:"rejected,omitempty"`
}

// FileRecord is one file the sidecar replaced.
type FileRecord struct {
	Path string `json:"path"`
	// Original is the content before the sidecar's first change to the
	// file as it then was; nil when the file did not exist.
	Original []byte `json:"original"`
	Existed  bool   `json:"existed"`
	// Written is the SHA-256 of what the sidecar last wrote there.
	Written string `json:"written"`
}

// LoadedRecord: see State.Loaded.
type LoadedRecord struct {
	Fingerprint string    `json:"fingerprint"`
	Since       time.Time `json:"since"`
}

func sum(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

func (s *State) file(path string) *FileRecord {
	for i := range s.Files {
		if s.Files[i].Path == path {
			return &s.Files[i]
		}
	}
	return nil
}

// recordWrite books a write of data over old (nil: absent) at path. A file
// whose current content is not what the sidecar last wrote there is someone
// else's now: its current content becomes the one to restore.
func (s *State) recordWrite(path string, old []byte, existed bool, data []byte) {
	if r := s.file(path); r != nil {
		if existed && sum(old) == r.Written {
			r.Written = sum(data)
			return
		}
		r.Original, r.Existed, r.Written = old, existed, sum(data)
		return
	}
	s.Files = append(s.Files, FileRecord{Path: path, Original: old, Existed: existed, Written: sum(data)})
}

// StateStore reads and writes the state file atomically.
type StateStore struct{ Path string }

// Load returns the state; empty when there is none yet.
func (st StateStore) Load() (State, error) {
	var s State
	data, err := os.ReadFile(st.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return s, nil
	}
	if err != nil {
		return s, fmt.Errorf("read state %s: %w", st.Path, err)
	}
	if err := json.Unmarshal(data, &s); err != nil {
		return s, fmt.Errorf("state %s does not parse (%v); remove it to start over (uninstall then cannot restore the files it recorded)", st.Path, err)
	}
	return s, nil
}

// Save writes s, or removes the file when s is empty.
func (st StateStore) Save(s State) error {
	if len(s.Files) == 0 && s.Loaded == nil && s.Rejected == "" {
		if err := os.Remove(st.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove state %s: %w", st.Path, err)
		}
		return nil
	}
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return WriteAtomic(st.Path, append(data, '\n'))
}

package remediate

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
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
	// Pending is the change written and not yet seen loaded by a running
	// containerd: what a rollback puts back. It lives here, not in the
	// process, so that a sidecar restarted between its write and the
	// restart's outcome (a pod restart, a kill, a node drain) still undoes
	// a change containerd does not come back with.
	Pending *PendingRecord `json:"pending,omitempty"`
}

// PendingRecord is a change awaiting its proof by a restarted containerd.
type PendingRecord struct {
	Fingerprint string `json:"fingerprint"`
	// Changes are in write order; a rollback undoes them in reverse.
	Changes []PendingChange `json:"changes"`
	// RollingBack: a rollback has begun; a sidecar stopped during it
	// finishes it at its next start, even where every file is back.
	RollingBack bool `json:"rollingBack,omitempty"`
	// Restored: the files are back, only the restart after the rollback
	// may be missing (the sidecar was stopped before it returned).
	Restored bool `json:"restored,omitempty"`
}

// PendingChange is one file of a pending change: its bytes before the
// first unproven write (Existed false: it did not exist) and the hash of
// what is there now ("" for a removal).
type PendingChange struct {
	Path     string `json:"path"`
	Previous []byte `json:"previous"`
	Existed  bool   `json:"existed"`
	Written  string `json:"written"`
}

// ours reports whether the pending change still has something to finish:
// a rollback under way, or files holding what was written.
func (p *PendingRecord) ours() bool {
	return p.RollingBack || p.Restored || len(p.inPlace()) > 0
}

// candidate identifies the whole pending change, from what containerd
// last ran with to what was written, by the formula configplan's
// candidateID gives a plan's Candidate (the two must agree: that is how a
// rejected change is known again): the same change planned again from the
// rolled-back files has this ID, however many passes the first write took.
func (p *PendingRecord) candidate() string {
	var b bytes.Buffer
	for _, c := range p.Changes {
		w := c.Written
		if w == "" {
			w = sum(nil)
		}
		fmt.Fprintf(&b, "%s\x00%s\x00%s\x00", c.Path, sum(c.Previous), w)
	}
	return sum(b.Bytes())
}

// writtenSum is PendingChange.Written for data (nil: removed).
func writtenSum(data []byte) string {
	if data == nil {
		return ""
	}
	return sum(data)
}

// recordPending books changes about to be written. A file whose current
// content is the unproven write of an earlier pending change keeps that
// change's previous bytes: a rollback goes back to what a containerd last
// ran with, not to another unproven write.
func (s *State) recordPending(fingerprint string, changes []configplan.FileChange) {
	p := &PendingRecord{Fingerprint: fingerprint}
	prev := map[string]PendingChange{}
	if s.Pending != nil && !s.Pending.Restored && !s.Pending.RollingBack {
		for _, c := range s.Pending.Changes {
			prev[c.Path] = c
		}
		p.Changes = s.Pending.Changes
	}
	for _, c := range changes {
		pc := PendingChange{Path: c.Path, Previous: c.Old, Existed: c.Old != nil, Written: writtenSum(c.New)}
		if old, ok := prev[c.Path]; ok && old.Written == writtenSum(c.Old) {
			pc.Previous, pc.Existed = old.Previous, old.Existed
		}
		p.Changes = slices.DeleteFunc(p.Changes, func(x PendingChange) bool { return x.Path == c.Path })
		p.Changes = append(p.Changes, pc)
	}
	s.Pending = p
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
	// A writer killed between its temp file and the rename leaves the
	// temp file behind; it never replaces anything, so it goes.
	CleanTemps(st.Path)
	if len(s.Files) == 0 && s.Loaded == nil && s.Rejected == "" && s.Pending == nil {
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

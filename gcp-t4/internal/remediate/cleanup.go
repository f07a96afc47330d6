package remediate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/nodeevents"
	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/configplan"
)

// CleanupResult says what an uninstall pass did on this node.
type CleanupResult struct {
	Restored  []string // files put back to their content before the sidecar
	Removed   []string // files the sidecar had created
	Kept      []string // files changed by someone else since: left as they are
	Restarted bool
}

// Cleanup restores the node to what it was before the sidecar: every file
// it changed gets back the bytes it had before (the drop-in it created is
// removed), unless someone else rewrote the file since; containerd is
// restarted only when a byte changed and it runs. This is the per-node
// uninstall step, as kata-deploy's cleanup is (runtime/containerd.rs
// cleanup_containerd at 4.0.0/4.1.0: restore the .bak, remove the drop-in
// and its import, then restart the runtime).
func (r *Remediator) Cleanup(ctx context.Context) (CleanupResult, error) {
	var out CleanupResult
	unlock, err := r.cfg.Lock.Acquire(ctx)
	if err != nil {
		return out, r.fail(ctx, nodeevents.CleanupFailed, err)
	}
	defer unlock()
	st, err := r.state.Load()
	if err != nil {
		return out, r.fail(ctx, nodeevents.CleanupFailed, err)
	}
	// Files that existed before go first: the main file's import of the
	// drop-in is gone before the drop-in is.
	recs := append([]FileRecord(nil), st.Files...)
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Existed && !recs[j].Existed })
	var errs []string
	for _, rec := range recs {
		cur, err := readOptional(rec.Path)
		if err != nil {
			errs = append(errs, fmt.Sprintf("read %s: %v", rec.Path, err))
			continue
		}
		if cur == nil && !rec.Existed {
			continue
		}
		if cur == nil || sum(cur) != rec.Written {
			out.Kept = append(out.Kept, rec.Path)
			r.log.Warn("file changed since the sidecar wrote it; left as it is", "path", rec.Path)
			continue
		}
		if bytes.Equal(cur, rec.Original) && rec.Existed {
			continue
		}
		if !rec.Existed {
			// containerd does not start while an import is missing: a file
			// the main file (as it now is) still imports stays.
			if files, err := configplan.LoadSet(r.cfg.Target.Config, nil); err == nil && configplan.Loads(files, rec.Path) {
				out.Kept = append(out.Kept, rec.Path)
				r.log.Warn("file still imported by containerd's configuration; left as it is", "path", rec.Path)
				continue
			}
		}
		c := configplan.FileChange{Path: rec.Path, Old: cur, New: rec.Original}
		if !rec.Existed {
			c.New = nil
		}
		if err := r.apply(c); err != nil {
			errs = append(errs, err.Error())
			continue
		}
		if rec.Existed {
			out.Restored = append(out.Restored, rec.Path)
		} else {
			out.Removed = append(out.Removed, rec.Path)
		}
	}
	if len(errs) > 0 {
		return out, r.fail(ctx, nodeevents.CleanupFailed, fmt.Errorf("uninstall on this node: %s; the state in %s keeps what is left to restore", strings.Join(errs, "; "), r.state.Path))
	}
	// kata-remote's create_container_timeout drop-in: kata reads config.d
	// when each sandbox starts, so its removal needs no restart.
	var kataRemoved string
	if kf, err := r.kataPaths(r.cfg.Handler); err == nil && !r.cfg.DryRun {
		kataRemoved, err = r.removeKataDropIn(kf)
		switch {
		case errors.Is(err, errNotOurs):
			out.Kept = append(out.Kept, filepath.Join(kf.ConfD, kataDropInName))
			r.log.Warn("file not written by the sidecar; left as it is", "err", err.Error())
		case err != nil:
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return out, r.fail(ctx, nodeevents.CleanupFailed, fmt.Errorf("uninstall on this node: %s", strings.Join(errs, "; ")))
	}
	if err := r.state.Save(State{}); err != nil {
		return out, r.fail(ctx, nodeevents.CleanupFailed, err)
	}
	os.Remove(r.cfg.Target.DropInDir) // only when empty
	changed := len(out.Restored)+len(out.Removed) > 0
	if changed && r.restarter != nil && !r.cfg.DryRun {
		if _, err := r.restarter.StartedAt(ctx); err == nil {
			rctx, cancel := context.WithTimeout(ctx, r.cfg.VerifyTimeout)
			err := r.restarter.Restart(rctx)
			cancel()
			if err != nil {
				return out, r.fail(ctx, nodeevents.CleanupFailed, fmt.Errorf("restored %s, but restarting containerd failed: %w", strings.Join(append(out.Restored, out.Removed...), ", "), err))
			}
			out.Restarted = true
		}
	}
	if kataRemoved != "" {
		out.Removed = append(out.Removed, kataRemoved)
		changed = true
	}
	msg := "nothing of the sidecar's was left on this node"
	if changed {
		msg = fmt.Sprintf("restored %s to its content before gcp-t4 (removed %s); restarted containerd: %v",
			orNone(out.Restored), orNone(out.Removed), out.Restarted)
	}
	if len(out.Kept) > 0 {
		msg += fmt.Sprintf("; left %s as it is (changed by someone else since)", strings.Join(out.Kept, ", "))
	}
	r.events.Emit(ctx, false, ReasonNodeRestored, msg)
	return out, nil
}

// ReasonNodeRestored is the Event an uninstall pass records on its Node;
// `gcp-t4 uninstall` looks for it.
const ReasonNodeRestored = nodeevents.ConfigRemoved

func orNone(s []string) string {
	if len(s) == 0 {
		return "nothing"
	}
	return strings.Join(s, ", ")
}

// cleanupTimeout bounds the uninstall pass on SIGTERM; the DaemonSet's
// terminationGracePeriodSeconds leaves room for it.
const cleanupTimeout = 150 * time.Second

package install

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os/exec"
	"path/filepath"
	"strings"
)

// refuseCommittableKey refuses a service account key file that a `git
// add` would commit: one inside a git work tree that git does not ignore,
// or one git already tracks. A key in a repository is a key on every
// clone and in every push; the guides write theirs outside any work tree
// (docs/install.md step 3), and this catches a key left in a checkout,
// the repository's own included.
//
// It asks git rather than walking up for .git: whether a file is ignored
// is git's answer alone (nested .gitignore files, .git/info/exclude,
// core.excludesFile, negations, linked work trees whose .git is a file),
// and a reimplementation would either refuse a key the user did ignore or
// pass one git would add. Without git there is no check (a debug line
// says so): no git, no `git add`. A git that fails for another reason
// does not stop the install either; the key is only read.
func refuseCommittableKey(ctx context.Context, flag, path string, log *slog.Logger) error {
	if path == "" {
		return nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	git, err := exec.LookPath("git")
	if err != nil {
		log.Debug("git not found: not checking whether the key file is in a git work tree", "flag", flag, "err", err)
		return nil
	}
	// Run from the file's directory on its base name: git resolves the
	// work tree from there, and a path through a symbolic link (/tmp on
	// some systems) cannot then fall "outside repository".
	dir, base := filepath.Dir(path), filepath.Base(path)
	run := func(args ...string) (string, int, error) {
		cmd := exec.CommandContext(ctx, git, append([]string{"-C", dir}, args...)...)
		out, err := cmd.Output()
		var exit *exec.ExitError
		if errors.As(err, &exit) {
			return "", exit.ExitCode(), nil
		}
		return strings.TrimSpace(string(out)), 0, err
	}
	top, code, err := run("rev-parse", "--show-toplevel")
	if err != nil || code != 0 || top == "" {
		// Not in a work tree (git says so with exit 128), or inside a
		// .git directory, where `git add` takes nothing.
		log.Debug("the key file is in no git work tree", "flag", flag, "exit", code, "err", err)
		return nil
	}
	if _, code, err := run("ls-files", "--error-unmatch", "--", base); err == nil && code == 0 {
		return fmt.Errorf("--%s %q: git tracks this service account key in the work tree %q, so it is in the next commit, or already in one: run `git rm --cached` on it, move it out of the work tree (docs/install.md keeps it in ~/.config/caa-gcp-t4), and if it was ever pushed, delete the key (gcloud iam service-accounts keys delete)",
			flag, path, top)
	}
	_, code, err = run("check-ignore", "-q", "--", base)
	switch {
	case err != nil:
		log.Debug("git check-ignore did not run: not checking the key file", "flag", flag, "err", err)
		return nil
	case code == 0:
		return nil // ignored
	case code == 1:
		return fmt.Errorf("--%s %q: this service account key lies in the git work tree %q, which does not ignore it: `git add` there would commit it; move it out of the work tree (docs/install.md keeps it in ~/.config/caa-gcp-t4, mode 0600), or add it to .gitignore",
			flag, path, top)
	default:
		log.Debug("git check-ignore failed: not checking the key file", "flag", flag, "exit", code)
		return nil
	}
}

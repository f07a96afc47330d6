// Package modelcar is the process of a model image's container: the
// pattern KServe calls a modelcar. The model's files are the image's
// layers, so on a podVM with the cache disk they are the pre-unpacked
// store's directories, mounted in place, read at disk speed and never
// downloaded (docs/cache.md, "Weights"). The serving container cannot
// mount another container's image, but with the pod's process namespace
// shared it can reach this process's root through /proc/PID/root; this
// process puts that path in a volume both containers mount, as a
// symbolic link, and keeps the image's root alive until it is stopped.
//
// Reading /proc/PID/root needs the kernel's ptrace read check
// (fs/proc/base.c proc_root_link → proc_fd_access_allowed →
// ptrace_may_access(PTRACE_MODE_READ_FSCREDS)): the reader's uid and gid
// must be this process's, or the reader must hold CAP_SYS_PTRACE, which
// the serving container should not. So this container runs as the serving
// container's user (the Ray image's ray, 1000:100).
//
// It links the standard library and stdflags only, as the podVM's binaries
// do (gcp-t4/cmd's deps test): it runs in every tenant pod that uses it.
package modelcar

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
)

// Defaults: where `gcp-t4 cache model` puts the files in the image, and
// where the serving example mounts the shared volume.
const (
	ModelsDir = "/models"
	Link      = "/mnt/model/weights"
	// Binary is where `gcp-t4 cache model` puts this program in the image.
	Binary = "/modelcar"
)

// The image config labels `gcp-t4 cache model` writes: they mark a model
// image (its value the model's directory name) and give its weights' size,
// which gcp-t4 plan reads in a cache layout.
const (
	Label      = "io.caa-gcp-t4.model"
	BytesLabel = "io.caa-gcp-t4.model.bytes"
)

// Main is the modelcar command: hold (the default) or -check.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, log *slog.Logger) int {
	fs := flag.NewFlagSet("modelcar", flag.ContinueOnError)
	models := fs.String("models", ModelsDir, "the model's directory in this image")
	link := fs.String("link", Link, "the symbolic link to write, in a volume the serving container mounts too")
	check := fs.Bool("check", false, "only check that -link leads to the model (a startup probe), and exit")
	about := "Runs as a model image's container (a modelcar, docs/cache.md \"Weights\"): links -link to this\n" +
		"process's view of -models, /proc/PID/root" + ModelsDir + ", for the serving container of the same pod\n" +
		"(shareProcessNamespace: true, the same user) to read in place, and waits until it is stopped.\n" +
		"-check exits 0 when the link leads to a readable model directory, 1 with the reason otherwise."
	if code, ok := stdflags.Parse(fs, args, about, stdout, stderr); !ok {
		return code
	}
	if *check {
		n, err := Check(*link)
		if err != nil {
			fmt.Fprintf(stderr, "modelcar: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "modelcar: %s leads to the model (%d entries)\n", *link, n)
		return 0
	}
	files, size, err := Hold(*models, *link, os.Getpid())
	if err != nil {
		fmt.Fprintf(stderr, "modelcar: %v\n", err)
		return 1
	}
	log.Info("model linked", "link", *link, "target", Target(os.Getpid(), *models), "files", files, "bytes", size)
	<-ctx.Done()
	// The pod is stopping: a link left behind would lead a restarted
	// serving container to a process that is gone.
	if err := Unlink(*link, os.Getpid(), *models); err != nil {
		log.Warn("the link was not removed", "link", *link, "error", err)
	}
	return 0
}

// Target is the path through which another process of the pod's process
// namespace reaches dir in the root of process pid.
func Target(pid int, dir string) string {
	return "/proc/" + strconv.Itoa(pid) + "/root" + filepath.Clean("/"+dir)
}

// Hold checks that models is a directory holding regular files, and
// points link at it through process pid's root, replacing any earlier
// link (of a container that restarted) in one rename. It returns the
// files and bytes found.
func Hold(models, link string, pid int) (files int, size int64, err error) {
	if !filepath.IsAbs(models) || !filepath.IsAbs(link) {
		return 0, 0, fmt.Errorf("-models %q and -link %q must be absolute paths", models, link)
	}
	err = filepath.WalkDir(models, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			files++
			size += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, 0, fmt.Errorf("the model's directory %s: %w (is this a model image made by gcp-t4 cache model?)", models, err)
	}
	if files == 0 {
		return 0, 0, fmt.Errorf("the model's directory %s holds no file: not a model image made by gcp-t4 cache model", models)
	}
	dir := filepath.Dir(link)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return 0, 0, fmt.Errorf("%s: mount a volume there that the serving container mounts too (an emptyDir): %v", dir, err)
	}
	tmp := filepath.Join(dir, "."+filepath.Base(link)+"."+strconv.Itoa(pid))
	_ = os.Remove(tmp)
	if err := os.Symlink(Target(pid, models), tmp); err != nil {
		return 0, 0, err
	}
	if err := os.Rename(tmp, link); err != nil {
		_ = os.Remove(tmp)
		return 0, 0, err
	}
	return files, size, nil
}

// Unlink removes link if it is still this process's.
func Unlink(link string, pid int, models string) error {
	t, err := os.Readlink(link)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && t != Target(pid, models)) {
		return nil
	}
	if err != nil {
		return err
	}
	return os.Remove(link)
}

// Check is the startup probe: link exists, is a link into a process's
// root, and leads to a directory this user can list. It returns the
// directory's entries.
func Check(link string) (int, error) {
	t, err := os.Readlink(link)
	if err != nil {
		return 0, fmt.Errorf("%s: %w (the modelcar has not linked the model yet, or the volume is not shared)", link, err)
	}
	if !strings.HasPrefix(t, "/proc/") {
		return 0, fmt.Errorf("%s leads to %s, not into a process's root", link, t)
	}
	entries, err := os.ReadDir(link)
	if err != nil {
		return 0, fmt.Errorf("%s → %s: %w (the pod needs shareProcessNamespace: true, and the reader the modelcar's uid and gid)", link, t, err)
	}
	if len(entries) == 0 {
		return 0, fmt.Errorf("%s → %s is empty", link, t)
	}
	return len(entries), nil
}

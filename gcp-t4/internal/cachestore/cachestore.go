// Package cachestore is the podVM's podvm-cache-store: before
// confidential-data-hub's first pull, it checks the cache disk's
// pre-unpacked store (internal/imagestore, docs/cache.md) and, only when
// every check passes, puts the store's meta_store.json in image-rs's
// work_dir, so that image-rs finds the cached images by config digest and
// overlay-mounts their layers from the read-only disk instead of pulling
// and unpacking them.
//
// image-rs at the pin checks none of this itself, not even that a stored
// layer's directory is there, and an image_db entry it cannot mount fails
// every pull of that image, the mirror's and the registry's too
// (imagestore.Lookup). So a store that fails any check is not handed on:
// the work_dir is left as it was, image-rs pulls through the mirror or
// the registry as before, and the console line says why.
//
// Like the podVM's other binaries it links the standard library, its own
// package, imagestore and stdflags only (cmd/deps_test.go).
package cachestore

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// Defaults of the podVM's unit (caa-gcp-t4-cache-store.service). Dir is
// the cache disk's mount (run-caa\x2dgcp\x2dt4-cache.mount, the mirror's
// too); WorkDir is image-rs's work_dir as CDH builds its client without a
// cdh.toml that names another (image-rs/src/config.rs:17 at
// guest-components dcd55ea1; kata's KATA_IMAGE_WORK_DIR is the same
// path); GuestComponentsFile holds the guest-components commit of the
// image's CDH, which the image build writes from podvm/guest-artefacts.pins.
const (
	Dir                 = "/run/caa-gcp-t4/cache"
	WorkDir             = "/run/kata-containers/image"
	GuestComponentsFile = "/usr/lib/caa-gcp-t4/guest-components"
)

// ConsolePrefix starts the one line podvm-cache-store prints on the serial
// console: the store handed to image-rs, or why it was not.
const ConsolePrefix = "CAA-GCP-T4-STORE "

// Reasons of an unused store that are not imagestore's misses.
const (
	// MissWorkDirInUse: image-rs's work_dir already holds a
	// meta_store.json (CDH pulled before this ran); it is not replaced.
	MissWorkDirInUse imagestore.Miss = "work-dir-in-use"
	// MissStopped: the check did not finish (systemd stopped the unit).
	MissStopped imagestore.Miss = "stopped"
	// MissPodVM: the podVM itself is at fault (no guest-components pin,
	// a work_dir that cannot be written); the unit fails.
	MissPodVM imagestore.Miss = "podvm"
)

// Fallback is what image-rs does when the store is not used.
const Fallback = "image-rs pulls through the cache mirror, then each image's registry"

// Config is one run.
type Config struct {
	// Dir is where the cache disk is mounted; WorkDir image-rs's work_dir.
	Dir, WorkDir string
	// GuestComponents is the commit of this podVM's CDH (image-rs).
	GuestComponents string
	// Applied also checks owners, modes, whiteouts and opaque marks
	// (imagestore.Verify): true on the podVM, whose disk cachebuild's
	// debugfs pass gave them; a store written by a builder that is not
	// root has none.
	Applied bool
	// SysDevBlock is /sys/dev/block, where the device under Dir shows
	// whether it is a dm-verity device (verityBacked).
	SysDevBlock string
}

// Report is what the console line says.
type Report struct {
	State string `json:"state"` // in-use or unused
	// Miss and Reason say why a store is unused.
	Miss   imagestore.Miss `json:"miss,omitempty"`
	Reason string          `json:"reason,omitempty"`
	Images int             `json:"images,omitempty"`
	Layers int             `json:"layers,omitempty"`
	Bytes  int64           `json:"bytes,omitempty"`
	// Integrity is how the store's bytes are checked: "dm-verity" (each
	// block as it is read, against the admin's root hash: `open`) or
	// "read" (the whole store read against its manifest first, on a disk
	// that is not a verity device). VerifiedMs is how long that read took.
	Integrity       string `json:"integrity,omitempty"`
	VerifiedMs      int64  `json:"verified_ms,omitempty"`
	MetaStore       string `json:"meta_store,omitempty"`
	GuestComponents string `json:"guest_components,omitempty"`
	Fallback        string `json:"fallback,omitempty"`
}

// Load checks the store at cfg.Dir and, when it passes, writes its
// meta_store.json into cfg.WorkDir. The error is set only when the podVM
// itself is at fault (MissPodVM); a store that is absent, for another
// image-rs or damaged is a Report with State "unused" and a nil error.
func Load(ctx context.Context, cfg Config) (Report, error) {
	unused := func(m imagestore.Miss, reason string) Report {
		return Report{State: "unused", Miss: m, Reason: reason, Fallback: Fallback}
	}
	c, r := imagestore.Check(cfg.Dir, cfg.GuestComponents)
	if !r.Hit {
		return unused(r.Miss, r.Detail), nil
	}
	// On a dm-verity device every block is checked against the admin's
	// root hash as it is read, owners, modes and whiteouts too (they are
	// the filesystem's blocks): the whole store need not be read first,
	// and a changed block fails its read, in image-rs's mount too. Any
	// other disk is read whole against the manifest before use.
	integrity, start := "dm-verity", time.Now()
	verity, err := verityBacked(cfg.Dir, cfg.SysDevBlock)
	if err != nil {
		return unused(MissPodVM, "whether the cache disk is a dm-verity device: "+err.Error()), err
	}
	if !verity {
		integrity = "read"
		if err := imagestore.Verify(ctx, cfg.Dir, cfg.Applied); err != nil {
			if ctx.Err() != nil {
				return unused(MissStopped, "stopped before the whole store was read: "+err.Error()), nil
			}
			return unused(imagestore.MissTampered, err.Error()), nil
		}
	}
	verified := time.Since(start)
	if ctx.Err() != nil {
		return unused(MissStopped, "stopped after the store was read, before its meta_store.json was written"), nil
	}
	dst, inUse, err := install(cfg.WorkDir, c.MetaStore)
	if inUse {
		return unused(MissWorkDirInUse, dst+" is there already (image-rs has pulled before this ran): it is left as it is"), nil
	}
	if err != nil {
		return unused(MissPodVM, err.Error()), err
	}
	return Report{State: "in-use", Images: c.Images, Layers: c.Layers, Bytes: c.Bytes, Integrity: integrity, VerifiedMs: verified.Milliseconds(),
		MetaStore: dst, GuestComponents: cfg.GuestComponents}, nil
}

// install writes meta into workDir/meta_store.json without ever replacing
// one: a temporary file, then a hard link to the final name, which fails
// if the name exists (image-rs writes the file after a pull, and it must
// win). workDir is made if it is not there; it must not be a link.
func install(workDir string, meta []byte) (dst string, inUse bool, err error) {
	dst = filepath.Join(workDir, imagestore.MetaFile)
	st, err := os.Lstat(workDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// image-rs makes it too when it is missing; 0700, as the
		// /run/kata-containers mount's own directory.
		if err := os.Mkdir(workDir, 0o700); err != nil {
			return dst, false, fmt.Errorf("image-rs's work_dir: %w", err)
		}
	case err != nil:
		return dst, false, fmt.Errorf("image-rs's work_dir: %w", err)
	case !st.IsDir():
		return dst, false, fmt.Errorf("image-rs's work_dir %s is %v, not a directory", workDir, st.Mode().Type())
	}
	if _, err := os.Lstat(dst); err == nil {
		return dst, true, nil
	}
	tmp := filepath.Join(workDir, ".caa-gcp-t4-"+imagestore.MetaFile)
	_ = os.Remove(tmp)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o644)
	if err != nil {
		return dst, false, err
	}
	_, err = f.Write(meta)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Link(tmp, dst)
	}
	_ = os.Remove(tmp)
	if errors.Is(err, fs.ErrExist) {
		return dst, true, nil
	}
	return dst, false, err
}

// verityBacked says whether dir's filesystem is on a dm-verity device:
// its device's device-mapper UUID is libcryptsetup's for verity
// ("CRYPT-VERITY-…", which veritysetup sets). A
// device that is not device-mapper has no dm directory.
func verityBacked(dir, sysDevBlock string) (bool, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(dir, &st); err != nil {
		return false, err
	}
	uuid, err := os.ReadFile(fmt.Sprintf("%s/%d:%d/dm/uuid", sysDevBlock, unixMajor(st.Dev), unixMinor(st.Dev)))
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return strings.HasPrefix(string(uuid), "CRYPT-VERITY-"), nil
}

// unixMajor and unixMinor split a Linux dev_t (glibc's gnu_dev_major and
// gnu_dev_minor): the standard library exports no such helper.
func unixMajor(dev uint64) uint64 { return (dev>>8)&0xfff | (dev>>32)&^0xfff }
func unixMinor(dev uint64) uint64 { return dev&0xff | (dev>>12)&^0xff }

// commitRE is a full git commit id, as the pins name guest-components.
var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Main is podvm-cache-store. It exits 0 when the store is handed on or
// is not usable (an expected state: a disk without a store, a cache built
// for another image-rs), 1 when the podVM is at fault, 2 on misuse.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("podvm-cache-store", flag.ContinueOnError)
	dir := fl.String("dir", Dir, "the cache disk's mount point, holding the store in image-rs/")
	work := fl.String("work-dir", WorkDir, "image-rs's work_dir, where its meta_store.json goes")
	gcFile := fl.String("guest-components-file", GuestComponentsFile, "file holding the guest-components commit of this podVM's confidential-data-hub (written by the image build from the pins)")
	const about = "Runs in the podVM before confidential-data-hub: checks the cache disk's pre-unpacked image store\n" +
		"(its manifest, guest-components version, every layer there; every byte when the disk is not\n" +
		"read through dm-verity) and, only when it passes, writes its meta_store.json into image-rs's\n" +
		"work_dir, so that a cached image is overlay-mounted from the disk instead of pulled\n" +
		"(docs/cache.md). Prints one CAA-GCP-T4-STORE line.\n\n" +
		"podvm-cache-store open [flags]: opens the disk through dm-verity first (open -h).\n" +
		"podvm-cache-store sweep [flags]: removes the layers failed pulls left in the work_dir (sweep -h)."
	if len(args) > 0 && args[0] == "open" {
		return OpenMain(ctx, args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "sweep" {
		return SweepMain(ctx, args[1:], stdout, stderr)
	}
	if code, ok := stdflags.Parse(fl, args, about, stdout, stderr); !ok {
		return code
	}
	b, err := os.ReadFile(*gcFile)
	gc := strings.TrimSpace(string(b))
	if err == nil && !commitRE.MatchString(gc) {
		err = fmt.Errorf("%s holds %q, not a 40-hex commit: the image build writes it from podvm/guest-artefacts.pins", *gcFile, gc)
	}
	if err != nil {
		rep := Report{State: "unused", Miss: MissPodVM, Reason: "this podVM's guest-components version: " + err.Error(), Fallback: Fallback}
		consoleLine(stdout, rep)
		fmt.Fprintf(stderr, "podvm-cache-store: -guest-components-file: %v\n", err)
		return 1
	}
	rep, err := Load(ctx, Config{Dir: *dir, WorkDir: *work, GuestComponents: gc, Applied: true, SysDevBlock: "/sys/dev/block"})
	consoleLine(stdout, rep)
	if err != nil {
		fmt.Fprintf(stderr, "podvm-cache-store: %v\n", err)
		return 1
	}
	return 0
}

// consoleLine prints the report. A reason can quote what a damaged or
// hostile disk holds (a store_path, a file name): everything outside
// printable ASCII in it is escaped, control, bidi and format characters
// included, beyond what encoding/json escapes.
func consoleLine(w io.Writer, rep Report) {
	if len(rep.GuestComponents) > 12 {
		rep.GuestComponents = rep.GuestComponents[:12]
	}
	if q := strconv.QuoteToASCII(rep.Reason); len(q) >= 2 {
		rep.Reason = q[1 : len(q)-1]
	}
	b, _ := json.Marshal(rep)
	fmt.Fprintf(w, "%s%s\n", ConsolePrefix, b)
}

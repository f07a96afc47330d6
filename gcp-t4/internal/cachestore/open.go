package cachestore

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/stdflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// `podvm-cache-store open` runs first, before the cache disk is mounted:
// it opens the disk through dm-verity with the root hash and hash offset
// the provider put in the podVM's metadata (from the admin's
// GCP_CACHE_VERITY, a profile's cacheVerity or the template's metadata;
// never a pod's), so that every block the mirror and image-rs's store
// read from it is checked against that root. The disk is then mounted
// from the verity device only (run-caa\x2dgcp\x2dt4-cache.mount), so a
// disk without the value, with a malformed one, or whose blocks do not
// match it is not used at all: the open fails, the mount with it, and
// image-rs pulls from each image's registry.

// Defaults of caa-gcp-t4-cache-open.service.
const (
	// Device is the raw cache disk: the link the podVM's udev rule
	// (70-caa-gcp-t4-cache.rules) gives the labelled disk that is not a
	// device-mapper device, so the verity device, which carries the same
	// filesystem label once open, is never taken for it.
	Device = "/dev/caa-gcp-t4-cache-raw"
	// VerityName is the device-mapper name; the mount reads
	// /dev/mapper/VerityName.
	VerityName = "caa-gcp-t4-cache"
	// VerityMetadataURL is the attribute the provider sets
	// (gcpt4.CacheVerityMetadata; a test holds the two equal).
	VerityMetadataURL = "http://169.254.169.254/computeMetadata/v1/instance/attributes/" + VerityMetadataKey
	VerityMetadataKey = "caa-gcp-t4-cache-verity"
	// Veritysetup is cryptsetup's (cryptsetup-bin in the podVM): systemd
	// 252's systemd-veritysetup, which opens the root, takes no hash
	// offset ("Encountered unknown option 'hash-offset=…'", seen in the
	// boot test), and the tree is on the same disk after the filesystem.
	Veritysetup = "/usr/sbin/veritysetup"
)

// Misses of the open.
const (
	// MissNoVerity: the podVM's metadata holds no usable dm-verity value
	// for its cache disk.
	MissNoVerity imagestore.Miss = "no-verity"
	// MissVerityRefused: the disk does not match the configured root hash
	// (another disk, or one changed since cache build), or dm-verity could
	// not open it.
	MissVerityRefused imagestore.Miss = "verity-refused"
)

// DiskUnusedFallback is what image-rs does when the disk is not opened:
// neither the mirror nor the store runs.
const DiskUnusedFallback = "the cache disk is not used (no mirror, no store): image-rs pulls from each image's registry"

// verityValue is GCP_CACHE_VERITY's form (gcpt4.checkCacheVerity).
var verityValue = regexp.MustCompile(`^root=([0-9a-f]{64}),offset=([0-9]{1,16})$`)

// Verity is a parsed dm-verity value.
type Verity struct {
	Root   string
	Offset int64
}

// ParseVerity reads the metadata's value; it accepts exactly what the
// provider accepts.
func ParseVerity(s string) (Verity, error) {
	m := verityValue.FindStringSubmatch(s)
	if m == nil {
		return Verity{}, fmt.Errorf("%q is not root=<64 lowercase hex>,offset=<bytes>", s)
	}
	off, err := strconv.ParseInt(m[2], 10, 64)
	if err != nil || off < 4096 || off%4096 != 0 {
		return Verity{}, fmt.Errorf("offset=%s is not a whole number of 4096-byte blocks", m[2])
	}
	return Verity{Root: m[1], Offset: off}, nil
}

// OpenConfig is one open.
type OpenConfig struct {
	Device, Name, MetadataURL, Veritysetup string
	// Client reads the metadata; Attempts and Backoff bound its retries
	// (the metadata server answers once the network is up, which the unit
	// waits for, but a first request can still meet a reset).
	Client   *http.Client
	Attempts int
	Backoff  func(n int) time.Duration
	// MapperDir is where the verity device appears (/dev/mapper).
	MapperDir string
}

// metadataLimit bounds the value read: a valid one is 92 bytes.
const metadataLimit = 4096

// errNoAttribute is a metadata server's 404: the provider set no value.
var errNoAttribute = errors.New("no such attribute")

func fetchVerity(ctx context.Context, cfg OpenConfig) (string, error) {
	var last error
	for n := 1; n <= cfg.Attempts; n++ {
		if n > 1 {
			select {
			case <-ctx.Done():
				return "", ctx.Err()
			case <-time.After(cfg.Backoff(n - 1)):
			}
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, cfg.MetadataURL, nil)
		if err != nil {
			return "", err
		}
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := cfg.Client.Do(req)
		if err != nil {
			last = err
			continue
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, metadataLimit+1))
		resp.Body.Close()
		switch {
		case resp.StatusCode == http.StatusNotFound:
			return "", errNoAttribute
		case resp.StatusCode != http.StatusOK:
			last = fmt.Errorf("the metadata server answered %s", resp.Status)
			continue
		case err != nil:
			last = err
			continue
		case len(b) > metadataLimit:
			return "", fmt.Errorf("the value is over %d bytes", metadataLimit)
		}
		return string(b), nil
	}
	return "", fmt.Errorf("after %d attempts: %w", cfg.Attempts, last)
}

// Open opens cfg.Device through dm-verity as cfg.Name. The report is set
// whenever the disk is not opened; the error then says the unit fails, so
// that the mount, which requires it, fails at once instead of waiting for a
// device that will not come.
func Open(ctx context.Context, cfg OpenConfig) (Report, error) {
	refused := func(m imagestore.Miss, reason string) (Report, error) {
		return Report{State: "unused", Miss: m, Reason: reason, Fallback: DiskUnusedFallback}, errors.New(reason)
	}
	raw, err := fetchVerity(ctx, cfg)
	switch {
	case errors.Is(err, errNoAttribute):
		return refused(MissNoVerity, "the podVM has a cache disk but its metadata has no "+VerityMetadataKey+": the admin's GCP_CACHE_VERITY (or the profile's cacheVerity, or the template's metadata) names the disk's root hash, and the disk is opened with nothing else")
	case err != nil:
		return refused(MissNoVerity, "reading "+VerityMetadataKey+" from the metadata server: "+err.Error())
	}
	v, err := ParseVerity(strings.TrimSpace(raw))
	if err != nil {
		return refused(MissNoVerity, VerityMetadataKey+": "+err.Error())
	}
	// veritysetup open DATA NAME HASH ROOTHASH: the hash tree is on the
	// same disk, after the filesystem; its superblock there gives the salt
	// and sizes, and the root hash, the admin's, checks them all.
	cmd := exec.CommandContext(ctx, cfg.Veritysetup, "open", cfg.Device, cfg.Name, cfg.Device, v.Root, "--hash-offset="+strconv.FormatInt(v.Offset, 10))
	if out, err := cmd.CombinedOutput(); err != nil {
		return refused(MissVerityRefused, fmt.Sprintf("dm-verity could not open %s with root hash %s…: %v: %s", cfg.Device, v.Root[:12], err, bytes.TrimSpace(out)))
	}
	// dm-verity checks a block when it is read, up to the root: reading
	// the filesystem's first blocks (its superblock) says now whether
	// this disk is the one the root hash names, before anything mounts it.
	dev := cfg.MapperDir + "/" + cfg.Name
	if err := readHead(dev); err != nil {
		detach := exec.CommandContext(context.WithoutCancel(ctx), cfg.Veritysetup, "close", cfg.Name)
		_ = detach.Run()
		return refused(MissVerityRefused, fmt.Sprintf("the cache disk does not match the configured root hash %s… (another disk, or one changed since gcp-t4 cache build): reading %s: %v", v.Root[:12], dev, err))
	}
	return Report{State: "open", Reason: "dm-verity, root hash " + v.Root[:12] + "…"}, nil
}

// readHead reads the first 64 KiB of dev.
func readHead(dev string) error {
	f, err := os.Open(dev)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.ReadFull(f, make([]byte, 64<<10))
	return err
}

// OpenMain is `podvm-cache-store open`: exit 0 when the disk is open, 1
// when it is not (the console line says why), 2 on misuse.
func OpenMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fl := flag.NewFlagSet("podvm-cache-store open", flag.ContinueOnError)
	dev := fl.String("device", Device, "the raw cache disk")
	name := fl.String("name", VerityName, "the device-mapper name of the verity device (/dev/mapper/NAME)")
	url := fl.String("metadata-url", VerityMetadataURL, "where the podVM's dm-verity value for the disk is read")
	vs := fl.String("veritysetup", Veritysetup, "cryptsetup's veritysetup")
	const about = "Runs in the podVM before the cache disk is mounted: opens the disk through dm-verity with the root\n" +
		"hash and hash offset in the podVM's caa-gcp-t4-cache-verity metadata (the admin's GCP_CACHE_VERITY),\n" +
		"and checks that its first blocks verify. On any failure the disk is not used and one\n" +
		"CAA-GCP-T4-STORE line says why (docs/cache.md)."
	if code, ok := stdflags.Parse(fl, args, about, stdout, stderr); !ok {
		return code
	}
	cfg := OpenConfig{Device: *dev, Name: *name, MetadataURL: *url, Veritysetup: *vs, MapperDir: "/dev/mapper",
		Client: &http.Client{Timeout: 10 * time.Second}, Attempts: 6,
		Backoff: func(n int) time.Duration { return time.Duration(n) * time.Second }}
	rep, err := Open(ctx, cfg)
	if err != nil {
		consoleLine(stdout, rep)
		fmt.Fprintf(stderr, "podvm-cache-store open: %v\n", err)
		return 1
	}
	fmt.Fprintf(stderr, "podvm-cache-store open: %s opened as /dev/mapper/%s (%s)\n", *dev, *name, rep.Reason)
	return 0
}

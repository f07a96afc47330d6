package cachebuild

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

const usage = `Usage: gcp-t4 cache build -o DIR [-platform linux/amd64] [-disk FILE.tar.gz] IMAGE@sha256:DIGEST...

Writes the images a workload pulls, each pinned by digest, into a new OCI image
layout at DIR: the contents of a cache disk, which the podVM's registry mirror
serves to image-rs (docs/cache.md). For a multi-platform image it keeps the index
and the one platform's image. Every blob is read back against its digest before
it returns. Registry credentials come from the Docker config
(~/.docker/config.json), as docker and crane read them.

Flags:
`

// Main is `gcp-t4 cache`: build, and initdata and check (initdata.go).
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
		fmt.Fprint(stdout, usage)
		return 0
	}
	if len(args) > 0 && args[0] == "initdata" {
		return initdataMain(args[1:], stdout, stderr)
	}
	if len(args) > 0 && args[0] == "check" {
		return checkMain(args[1:], stdout, stderr)
	}
	if len(args) == 0 || args[0] != "build" {
		fmt.Fprintln(stderr, "usage: gcp-t4 cache build -o DIR IMAGE@sha256:DIGEST... | initdata | check (gcp-t4 cache SUBCOMMAND -h for more)")
		return 2
	}
	fs := flag.NewFlagSet("gcp-t4 cache build", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	out := fs.String("o", "", "the new layout's directory (must not exist, or be empty)")
	platform := fs.String("platform", "linux/amd64", "the platform kept from a multi-platform image: the podVM's")
	disk := fs.String("disk", "", "also write the layout as a GCE image file here (FILE.tar.gz: disk.raw holding an ext4 filesystem, reproducible), for gcloud compute images create --source-uri")
	if err := fs.Parse(args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *out == "" {
		fmt.Fprintln(stderr, "gcp-t4 cache build: -o DIR is required: where the layout is written")
		return 2
	}
	p, err := v1.ParsePlatform(*platform)
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache build: -platform %q: %v (use OS/ARCH, such as linux/amd64)\n", *platform, err)
		return 2
	}
	imgs, err := Build(ctx, *out, fs.Args(), Options{Platform: *p, Remote: []remote.Option{remote.WithAuthFromKeychain(authn.DefaultKeychain)}})
	if err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache build: %v\n", err)
		return 1
	}
	if err := Verify(*out); err != nil {
		fmt.Fprintf(stderr, "gcp-t4 cache build: %v\n", err)
		return 1
	}
	tw := tabwriter.NewWriter(stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "IMAGE\tLAYERS\tSIZE\tMANIFEST")
	var total int64
	for _, i := range imgs {
		fmt.Fprintf(tw, "%s\t%d\t%.1f MB\t%s\n", i.Ref, i.Layers, float64(i.Bytes)/1e6, i.Manifest)
		total += i.Bytes
	}
	_ = tw.Flush()
	fmt.Fprintf(stdout, "%d images, %.1f MB, written to %s and read back against their digests\n", len(imgs), float64(total)/1e6, *out)
	if *disk != "" {
		size, err := Disk(ctx, *out, *disk)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache build: the disk image: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "GCE image file %s: a %d GiB disk, filesystem label %s (docs/cache.md)\n", *disk, size, FilesystemLabel)
	}
	return 0
}

package cachebuild

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"text/tabwriter"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/termout"
)

var buildUsage = cli.Usage{
	Synopsis: []string{"gcp-t4 cache build -o DIR [-platform linux/amd64] [-disk FILE.tar.gz] IMAGE@sha256:DIGEST..."},
	About: []string{"Writes the images a workload pulls, each pinned by digest, into a new OCI image layout at DIR: the " +
		"contents of a cache disk, which the podVM's registry mirror serves to image-rs (docs/cache.md). For a " +
		"multi-platform image it keeps the index and the one platform's image, and in DIR/image-rs the same images " +
		"unpacked in image-rs's store format. Every blob is read back against its " +
		"digest before it returns. Registry credentials come from the Docker config (~/.docker/config.json), as " +
		"docker and crane read them."},
}

// VerityFileSuffix names the file beside -disk's that holds the disk's
// GCP_CACHE_VERITY value.
const VerityFileSuffix = ".verity"

// Main is `gcp-t4 cache`: build, and initdata and check (initdata.go),
// each with its own help.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	return cli.Group{
		Path: "gcp-t4 cache",
		About: []string{"A workload's images, pinned by digest, on a podVM cache disk that the podVM's registry mirror " +
			"serves to image-rs; the initdata that sends a pod's pulls to that mirror; and which of a workload's " +
			"images it serves (docs/cache.md)."},
		Commands: map[string]cli.Command{
			"build":    {Summary: "write the images, pinned by digest, into the cache disk's OCI layout (and -disk, its GCE image file)", Run: buildMain},
			"initdata": {Summary: "print the initdata that sends a pod's image pulls to the podVM's cache mirror", Run: initdataMain},
			"model":    {Summary: "make a model's files into an image (a modelcar) for the cache disk, and push it", Run: modelMain},
			"check":    {Summary: "say, for each container of a workload, whether the cache serves its image, and why", Run: checkMain},
		},
	}.Run(ctx, args, stdout, stderr, logger)
}

// buildMain is `gcp-t4 cache build`.
func buildMain(ctx context.Context, args []string, stdout, stderr io.Writer, _ *slog.Logger) int {
	fs := cli.NewFlagSet("gcp-t4 cache build", buildUsage)
	out := fs.String("o", "", "the new layout's directory (must not exist, or be empty)")
	platform := fs.String("platform", "linux/amd64", "the platform kept from a multi-platform image: the podVM's")
	disk := fs.String("disk", "", "also write the layout as a GCE image file here (FILE.tar.gz: disk.raw holding an ext4 filesystem, reproducible), for gcloud compute images create --source-uri")
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	if *out == "" {
		return cli.Misuse(fs, stderr, "-o DIR is required: where the layout is written")
	}
	if fs.NArg() == 0 {
		return cli.Misuse(fs, stderr, "no images: name each as IMAGE@sha256:DIGEST")
	}
	p, err := v1.ParsePlatform(*platform)
	if err != nil {
		return cli.Misuse(fs, stderr, "-platform %q: %v (use OS/ARCH, such as linux/amd64)", *platform, err)
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
	for _, i := range imgs {
		if i.NotUnpacked != "" {
			fmt.Fprintf(stdout, "not pre-unpacked (the mirror serves it): %s\n", termout.Clean(i.NotUnpacked))
		}
	}
	if *disk != "" {
		size, v, err := Disk(ctx, *out, *disk)
		if err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache build: the disk image: %v\n", err)
			return 1
		}
		// The value the admin gives the provider beside the image; the
		// file beside the disk lets a script read it back.
		if err := os.WriteFile(*disk+VerityFileSuffix, []byte(v.String()+"\n"), 0o644); err != nil {
			fmt.Fprintf(stderr, "gcp-t4 cache build: %v\n", err)
			return 1
		}
		fmt.Fprintf(stdout, "GCE image file %s: a %d GiB disk, filesystem label %s, dm-verity root hash %s (docs/cache.md)\n", *disk, size, FilesystemLabel, v.RootHash)
		fmt.Fprintf(stdout, "give the provider GCP_CACHE_VERITY=%s with this image (also in %s)\n", v, *disk+VerityFileSuffix)
	}
	return 0
}

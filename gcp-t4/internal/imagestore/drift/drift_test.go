package drift

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// tree is a guest-components repository (checkout or bare clone) holding
// imagestore.GuestComponents: make imagestore-drift passes it.
var tree = flag.String("tree", "", "a guest-components git repository holding the commit imagestore writes for (make imagestore-drift GUEST_COMPONENTS=DIR)")

// A tree written the way image-rs is at the pin, by hand here (image-rs's
// own files are read from a fetched tree, never copied in): the parser's
// cases, and that each change the check exists for is found.
func fake(files map[string]string) Source {
	return func(_ context.Context, p string) (string, error) {
		return files[p], nil
	}
}

func goodTree() map[string]string {
	return map[string]string{
		"image-rs/src/meta_store.rs":  "pub const METAFILE: &str = \"meta_store.json\";\n\n#[derive(Clone, Default, Serialize, Deserialize, Debug)]\npub struct MetaStore {\n    // image_db holds map\n    pub image_db: HashMap<String, ImageMeta>,\n\n    pub layer_db: HashMap<String, LayerMeta>,\n    pub snapshot_db: HashMap<String, usize>,\n}\n",
		"image-rs/src/image.rs":       "#[derive(Clone, Debug)]\npub struct LayerMeta {\n    /// doc\n    pub decoder: Compression,\n    pub encrypted: bool,\n    pub compressed_digest: String,\n    pub uncompressed_digest: String,\n    pub store_path: String,\n}\n\npub struct ImageMeta {\n    pub id: String,\n    pub digest: String,\n    pub reference: String,\n    pub image_config: ImageConfiguration,\n    pub signed: bool,\n    pub layer_metas: Vec<LayerMeta>,\n}\n",
		"image-rs/src/layer_store.rs": "let index = name.to_string_lossy().parse::<usize>()?;\nlet data_dir = work_dir.join(\"layers\");\n",
		"image-rs/src/decoder/mod.rs": "pub enum Compression {\n    Uncompressed,\n    #[default]\n    Gzip,\n    Zstd,\n}\n",
	}
}

func TestCheckFindsEachDrift(t *testing.T) {
	ctx := context.Background()
	got, err := Check(ctx, fake(goodTree()))
	if err != nil || len(got) != 0 {
		t.Fatalf("the pin's shape: %v, %v", got, err)
	}
	for name, tc := range map[string]struct {
		file, from, to, want string
	}{
		"a field renamed":        {"image-rs/src/image.rs", "pub store_path: String", "pub path: String", "LayerMeta has fields"},
		"a serde rename":         {"image-rs/src/image.rs", "    pub signed: bool,", "    #[serde(rename = \"is_signed\")]\n    pub signed: bool,", "ImageMeta has fields"},
		"a field added":          {"image-rs/src/meta_store.rs", "pub snapshot_db: HashMap<String, usize>,", "pub snapshot_db: HashMap<String, usize>,\n    pub extra: u8,", "MetaStore has fields"},
		"rename_all":             {"image-rs/src/meta_store.rs", "#[derive(Clone, Default, Serialize, Deserialize, Debug)]", "#[serde(rename_all = \"camelCase\")]", "rename_all"},
		"the metadata file":      {"image-rs/src/meta_store.rs", "\"meta_store.json\"", "\"meta.json\"", "METAFILE"},
		"the layer directory":    {"image-rs/src/layer_store.rs", "\"layers\"", "\"blobs\"", "work_dir/layers"},
		"layers named otherwise": {"image-rs/src/layer_store.rs", ".parse::<usize>()", ".to_owned()", "parsed as numbers"},
		"a decoder renamed":      {"image-rs/src/decoder/mod.rs", "Gzip,", "GzipStream,", "no variant Gzip"},
	} {
		t.Run(name, func(t *testing.T) {
			files := goodTree()
			if !strings.Contains(files[tc.file], tc.from) {
				t.Fatalf("the fake tree lacks %q", tc.from)
			}
			files[tc.file] = strings.Replace(files[tc.file], tc.from, tc.to, 1)
			got, err := Check(ctx, fake(files))
			if err != nil || !slices.ContainsFunc(got, func(f string) bool { return strings.Contains(f, tc.want) }) {
				t.Errorf("findings %v (%v), want one saying %q", got, err, tc.want)
			}
		})
	}
}

// TestImageRsAtThePin reads image-rs at imagestore.GuestComponents in the
// tree -tree names: run by hand (make imagestore-drift), like the drop-in
// check, since no fetched tree is part of this repository or of CI.
func TestImageRsAtThePin(t *testing.T) {
	if *tree == "" {
		t.Skip("no -tree: make imagestore-drift GUEST_COMPONENTS=DIR runs this against a fetched guest-components")
	}
	if _, err := os.Stat(*tree); err != nil {
		t.Fatalf("-tree %s: %v", *tree, err)
	}
	got, err := Check(t.Context(), GitTree(*tree, imagestore.GuestComponents))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range got {
		t.Errorf("drift from image-rs at %.12s: %s", imagestore.GuestComponents, f)
	}
	if len(got) == 0 {
		t.Logf("imagestore writes what image-rs at guest-components %s reads", imagestore.GuestComponents)
	}
}

// make imagestore-drift without GUEST_COMPONENTS says what to give and
// exits 2; with a path that is not a repository holding the commit, the
// check fails naming it.
func TestMakeTargetSaysWhatIsMissing(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: runs make")
	}
	root := "../../../.."
	cmd := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-s", "-C", root, "imagestore-drift", "GUEST_COMPONENTS=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || !strings.Contains(string(out), "give GUEST_COMPONENTS=DIR") {
		t.Errorf("no GUEST_COMPONENTS: %v\n%s", err, out)
	}
	bogus := t.TempDir()
	if err := exec.CommandContext(t.Context(), "git", "init", "-q", bogus).Run(); err != nil {
		t.Fatal(err)
	}
	cmd = exec.CommandContext(t.Context(), "make", "--no-print-directory", "-s", "-C", root, "imagestore-drift", "GUEST_COMPONENTS="+bogus)
	out, err = cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the commit must be in it") {
		t.Errorf("a repository without the commit: %v\n%s", err, out)
	}
}

// Package drift checks that the store imagestore writes is what image-rs
// reads, against image-rs's own source at the guest-components commit the
// store is for (imagestore.GuestComponents): the serde field names of its
// MetaStore, ImageMeta and LayerMeta against our JSON tags, the names of
// its metadata file and layer directory, the decoder variant we write, and
// that its layer directories are numbered. It reads a fetched
// guest-components tree (the module proxy serves no Rust), never a copy of
// it in this repository: `make imagestore-drift GUEST_COMPONENTS=DIR` runs
// it by hand, as dropin-check runs against a fetched CAA.
package drift

import (
	"context"
	"fmt"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/caa-gcp-t4/gcp-t4/internal/imagestore"
)

// Source reads a file of the tree at a commit.
type Source func(ctx context.Context, path string) (string, error)

// GitTree reads files at commit from the git repository at dir (a
// checkout or a bare clone); the commit must be in it.
func GitTree(dir, commit string) Source {
	return func(ctx context.Context, path string) (string, error) {
		out, err := exec.CommandContext(ctx, "git", "-C", dir, "show", commit+":"+path).Output()
		if err != nil {
			var stderr string
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = strings.TrimSpace(string(ee.Stderr))
			}
			return "", fmt.Errorf("reading %s at %.12s in %s: %v %s (fetch guest-components with its history: the commit must be in it)", path, commit, dir, err, stderr)
		}
		return string(out), nil
	}
}

// structFields is the serde names of a Rust struct's fields, in order:
// each `pub name: Type,` of `pub struct Name { … }`, renamed where a
// #[serde(rename = "…")] says so. A rename_all on the struct is refused:
// the check would have to apply it.
func structFields(src, name string) ([]string, error) {
	start := regexp.MustCompile(`(?m)^((?:#\[[^\n]*\]\s*)*)pub struct ` + name + ` \{`)
	m := start.FindStringSubmatchIndex(src)
	if m == nil {
		return nil, fmt.Errorf("no `pub struct %s {`", name)
	}
	if strings.Contains(src[m[2]:m[3]], "rename_all") {
		return nil, fmt.Errorf("struct %s has a serde rename_all: compare it by hand", name)
	}
	body := src[m[1]:]
	end := strings.Index(body, "\n}")
	if end < 0 {
		return nil, fmt.Errorf("struct %s has no closing brace", name)
	}
	field := regexp.MustCompile(`^pub ([a-z_][a-z0-9_]*):`)
	rename := regexp.MustCompile(`#\[serde\([^)]*rename\s*=\s*"([^"]+)"`)
	var out []string
	pending := ""
	for _, line := range strings.Split(body[:end], "\n") {
		line = strings.TrimSpace(line)
		if r := rename.FindStringSubmatch(line); r != nil {
			pending = r[1]
			continue
		}
		if f := field.FindStringSubmatch(line); f != nil {
			n := f[1]
			if pending != "" {
				n, pending = pending, ""
			}
			out = append(out, n)
		}
	}
	return out, nil
}

// jsonTags is the JSON names of a Go struct's fields, in order.
func jsonTags(v any) []string {
	t := reflect.TypeOf(v)
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// Check compares; each finding names image-rs's file and what differs. An
// error is a tree that cannot be read.
func Check(ctx context.Context, read Source) ([]string, error) {
	files := map[string]string{}
	for _, p := range []string{"image-rs/src/meta_store.rs", "image-rs/src/image.rs", "image-rs/src/layer_store.rs", "image-rs/src/decoder/mod.rs"} {
		s, err := read(ctx, p)
		if err != nil {
			return nil, err
		}
		files[p] = s
	}
	var findings []string
	for _, c := range []struct {
		file, name string
		ours       any
	}{
		{"image-rs/src/meta_store.rs", "MetaStore", imagestore.MetaStore{}},
		{"image-rs/src/image.rs", "ImageMeta", imagestore.ImageMeta{}},
		{"image-rs/src/image.rs", "LayerMeta", imagestore.LayerMeta{}},
	} {
		theirs, err := structFields(files[c.file], c.name)
		if err != nil {
			findings = append(findings, fmt.Sprintf("%s: %v", c.file, err))
			continue
		}
		if ours := jsonTags(c.ours); !slices.Equal(ours, theirs) {
			findings = append(findings, fmt.Sprintf("%s: %s has fields %v, imagestore.%s writes %v", c.file, c.name, theirs, c.name, ours))
		}
	}
	if !strings.Contains(files["image-rs/src/meta_store.rs"], `pub const METAFILE: &str = "`+imagestore.MetaFile+`";`) {
		findings = append(findings, fmt.Sprintf("image-rs/src/meta_store.rs: METAFILE is not %q", imagestore.MetaFile))
	}
	ls := files["image-rs/src/layer_store.rs"]
	if !strings.Contains(ls, `work_dir.join("`+imagestore.LayersDir+`")`) {
		findings = append(findings, fmt.Sprintf("image-rs/src/layer_store.rs: the layer directory is not work_dir/%s", imagestore.LayersDir))
	}
	if !regexp.MustCompile(`\.parse(::<usize>)?\(\)`).MatchString(ls) {
		findings = append(findings, "image-rs/src/layer_store.rs: layer directories are no longer parsed as numbers")
	}
	enum := regexp.MustCompile(`(?s)pub enum Compression \{(.*?)\n\}`).FindStringSubmatch(files["image-rs/src/decoder/mod.rs"])
	for _, v := range []string{imagestore.DecoderUncompressed, imagestore.DecoderGzip, imagestore.DecoderZstd} {
		if enum == nil || !regexp.MustCompile(`(?m)^\s*`+v+`,`).MatchString(enum[1]) {
			findings = append(findings, fmt.Sprintf("image-rs/src/decoder/mod.rs: Compression has no variant %s", v))
		}
	}
	return findings, nil
}

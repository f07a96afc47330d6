package cachemirror

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layout writes a one-image OCI layout and returns the manifest's digest.
func layout(t *testing.T, dir, ref string) string {
	t.Helper()
	return layoutOf(t, dir, ref)[0].manifest
}

// cached is one image layoutOf wrote: its manifest's and config's digests.
type cached struct{ manifest, config string }

// blob writes b into the layout at dir and returns its digest.
func blob(t *testing.T, dir string, b []byte) string {
	t.Helper()
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	if err := os.MkdirAll(filepath.Join(dir, "blobs", "sha256"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "blobs", "sha256", h), b, 0o644); err != nil {
		t.Fatal(err)
	}
	return "sha256:" + h
}

// layoutOf writes an OCI layout of one image per ref, each with its own
// config, as cache build writes them.
func layoutOf(t *testing.T, dir string, refs ...string) []cached {
	t.Helper()
	var out []cached
	var entries []any
	for _, ref := range refs {
		cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{"Labels":{"ref":"` + ref + `"}}}`)
		c := blob(t, dir, cfg)
		man, _ := json.Marshal(map[string]any{
			"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
			"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": len(cfg)},
			"layers": []any{},
		})
		d := blob(t, dir, man)
		out = append(out, cached{manifest: d, config: c})
		entries = append(entries, map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": len(man),
			"annotations": map[string]string{RefNameAnnotation: ref},
		})
	}
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": entries})
	for name, b := range map[string][]byte{"index.json": idx, "oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// The unit's binary: one console line saying what it serves and where,
// then the registry API there, until its context ends.
func TestMainServesTheLayoutAndSaysSoOnTheConsole(t *testing.T) {
	dir := t.TempDir()
	d := layout(t, dir, "docker.io/rayproject/ray-llm@sha256:"+strings.Repeat("a", 64))
	ctx, cancel := context.WithCancel(context.Background())
	r, w := io.Pipe()
	code := make(chan int, 1)
	go func() {
		code <- Main(ctx, []string{"-dir", dir, "-listen", "127.0.0.1:0"}, w, io.Discard, slog.New(slog.DiscardHandler))
		w.Close()
	}()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	var st struct {
		State, Listen string
		Images        int
		Repositories  []string
	}
	if !strings.HasPrefix(line, ConsolePrefix) || json.Unmarshal([]byte(strings.TrimPrefix(line, ConsolePrefix)), &st) != nil {
		t.Fatalf("console line %q", line)
	}
	if st.State != "serving" || st.Images != 1 || len(st.Repositories) != 1 || st.Repositories[0] != "rayproject/ray-llm" {
		t.Fatalf("console line %q: want serving 1 image of rayproject/ray-llm", line)
	}
	resp, err := http.Get("http://" + st.Listen + "/v2/rayproject/ray-llm/manifests/" + d)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	sum := sha256.Sum256(b)
	if resp.StatusCode != http.StatusOK || "sha256:"+hex.EncodeToString(sum[:]) != d {
		t.Fatalf("GET the manifest: %d, digest of the body sha256:%x, want 200 and %s", resp.StatusCode, sum, d)
	}
	cancel()
	go func() { _, _ = io.Copy(io.Discard, r) }()
	if c := <-code; c != 0 {
		t.Fatalf("exit %d after its context ended, want 0", c)
	}
}

// A disk without a layout: a console line that says so and that images
// come from their registries, and the exit code the unit does not restart on.
func TestMainOnAnUnusableDisk(t *testing.T) {
	var out, errb bytes.Buffer
	c := Main(context.Background(), []string{"-dir", t.TempDir(), "-listen", "127.0.0.1:0"}, &out, &errb, slog.New(slog.DiscardHandler))
	if c != ExitUnusable {
		t.Fatalf("exit %d, want %d (stderr %q)", c, ExitUnusable, errb.String())
	}
	var st struct{ State, Reason, Fallback string }
	if err := json.Unmarshal([]byte(strings.TrimPrefix(strings.TrimSpace(out.String()), ConsolePrefix)), &st); err != nil {
		t.Fatalf("console %q: %v", out.String(), err)
	}
	if st.State != "unusable" || !strings.Contains(st.Reason, "not an OCI image layout") || !strings.Contains(st.Fallback, "registries") {
		t.Fatalf("console %q", out.String())
	}
	if c := Main(context.Background(), []string{"extra"}, &out, &errb, slog.New(slog.DiscardHandler)); c != 2 {
		t.Fatalf("an argument: exit %d, want 2", c)
	}
}

// The path a mirror entry asks for: the reference's path, without its
// registry host, tag and digest, whichever way the reference is written.
// cache initdata names the mirror's repositories from it.
func TestRepositoryPath(t *testing.T) {
	d := "@sha256:" + strings.Repeat("d", 64)
	for ref, want := range map[string]string{
		"docker.io/rayproject/ray-llm" + d:                          "rayproject/ray-llm",
		"index.docker.io/rayproject/ray-llm:2.52.0-py311-cu128" + d: "rayproject/ray-llm",
		"docker.io/busybox" + d:                                     "busybox",
		"docker.io/library/busybox" + d:                             "library/busybox",
		"quay.io/prometheus/busybox:latest" + d:                     "prometheus/busybox",
		"localhost:5000/team/app" + d:                               "team/app",
		"localhost/team/app" + d:                                    "team/app",
		"registry.example:443/a/b/c" + d:                            "a/b/c",
		"rayproject/ray-llm" + d:                                    "rayproject/ray-llm",
	} {
		if got := RepositoryPath(ref); got != want {
			t.Errorf("RepositoryPath(%s) = %s, want %s", ref, got, want)
		}
	}
}

package cachemirror

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// lineWriter hands each write to a channel.
type lineWriter chan string

func (w lineWriter) Write(p []byte) (int, error) { w <- string(p); return len(p), nil }

// next is the next pull line, as the mirror wrote it.
func (w lineWriter) next(t *testing.T) PullLine {
	t.Helper()
	select {
	case l := <-w:
		rest, ok := strings.CutPrefix(l, PullPrefix)
		var pl PullLine
		if !ok || !strings.HasSuffix(rest, "\n") || json.Unmarshal([]byte(rest), &pl) != nil {
			t.Fatalf("pull line %q", l)
		}
		return pl
	case <-time.After(time.Minute):
		t.Fatal("no pull line within a minute")
	}
	return PullLine{}
}

// layeredLayout writes one image with two layers; it returns the
// manifest's and the layers' digests.
func layeredLayout(t *testing.T, dir, ref string) (string, []string) {
	t.Helper()
	l1, l2 := blob(t, dir, []byte("layer one")), blob(t, dir, []byte("layer two"))
	cfg := []byte(`{"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]}}`)
	c := blob(t, dir, cfg)
	man, _ := json.Marshal(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": len(cfg)},
		"layers": []any{
			map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l1, "size": 9},
			map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": l2, "size": 9},
		},
	})
	d := blob(t, dir, man)
	idx, _ := json.Marshal(map[string]any{"schemaVersion": 2, "manifests": []any{map[string]any{
		"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": d, "size": len(man),
		"annotations": map[string]string{RefNameAnnotation: ref},
	}}})
	for name, b := range map[string][]byte{"index.json": idx, "oci-layout": []byte(`{"imageLayoutVersion":"1.0.0"}`)} {
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return d, []string{l1, l2}
}

func serve(m *Mirror, method, path string) int {
	rec := httptest.NewRecorder()
	m.ServeHTTP(rec, httptest.NewRequest(method, path, nil))
	return rec.Code
}

// What a pull asks for becomes at most one line per image and kind: the
// manifest served (a store hit asks for nothing more), the first layer
// served (the mirror's path), a digest the cache does not hold (the
// registry's). A HEAD of a layer is no pull of it; the config is no layer.
func TestPullLinesSayWhatWasServed(t *testing.T) {
	dir := t.TempDir()
	man, layers := layeredLayout(t, dir, "registry.example/team/app@sha256:"+strings.Repeat("a", 64))
	m, _ := openMirror(t, dir)
	w := make(lineWriter, 64)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.TellPulls(ctx, w)
	repo := "/v2/team/app/"
	if c := serve(m, http.MethodGet, repo+"manifests/"+man); c != http.StatusOK {
		t.Fatalf("GET manifest: %d", c)
	}
	if got := w.next(t); got != (PullLine{Image: man, Served: ServedManifest}) {
		t.Fatalf("after the manifest: %+v", got)
	}
	serve(m, http.MethodGet, repo+"manifests/"+man)
	serve(m, http.MethodHead, repo+"blobs/"+layers[0])
	serve(m, http.MethodGet, repo+"blobs/"+layers[1])
	if got := w.next(t); got != (PullLine{Image: man, Served: ServedLayers}) {
		t.Fatalf("after a layer (the same manifest again and a HEAD before it say nothing): %+v", got)
	}
	serve(m, http.MethodGet, repo+"blobs/"+layers[0])
	absent := "sha256:" + strings.Repeat("b", 64)
	if c := serve(m, http.MethodGet, repo+"manifests/"+absent); c != http.StatusNotFound {
		t.Fatalf("GET an absent manifest: %d", c)
	}
	if got := w.next(t); got != (PullLine{Image: absent, Served: ServedAbsent}) {
		t.Fatalf("after an absent manifest (the second layer says nothing): %+v", got)
	}
	// Under a repository the cache does not hold, and by a tag: the
	// first is told (its digest), a tag is no digest.
	serve(m, http.MethodGet, "/v2/other/app/manifests/latest")
	other := "sha256:" + strings.Repeat("c", 64)
	serve(m, http.MethodGet, "/v2/other/app/manifests/"+other)
	if got := w.next(t); got != (PullLine{Image: other, Served: ServedAbsent}) {
		t.Fatalf("an absent repository: %+v", got)
	}
}

// The digests a pod asks for that the cache does not hold are the
// pod's to choose: at most maxAbsentLines of them are told.
func TestAbsentPullLinesAreBounded(t *testing.T) {
	dir := t.TempDir()
	man, _ := layeredLayout(t, dir, "registry.example/team/app@sha256:"+strings.Repeat("a", 64))
	m, _ := openMirror(t, dir)
	w := make(lineWriter, 2*maxAbsentLines)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	m.TellPulls(ctx, w)
	for i := range 2 * maxAbsentLines {
		serve(m, http.MethodGet, fmt.Sprintf("/v2/team/app/manifests/sha256:%064x", i+1))
	}
	serve(m, http.MethodGet, "/v2/team/app/manifests/"+man)
	for i := range maxAbsentLines {
		if got := w.next(t); got.Served != ServedAbsent || got.Image != fmt.Sprintf("sha256:%064x", i+1) {
			t.Fatalf("absent line %d: %+v", i, got)
		}
	}
	if got := w.next(t); got != (PullLine{Image: man, Served: ServedManifest}) {
		t.Fatalf("after %d absent lines, want the cached image's, got %+v", maxAbsentLines, got)
	}
}

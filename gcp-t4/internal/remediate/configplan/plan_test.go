package configplan

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/remediate/containerdrelease"
	"github.com/caa-gcp-t4/gcp-t4/internal/tomledit"
)

// These tests run the planner without containerd: a Checker that merges
// the files as a release of the given strategy would (whole plugin tables
// replaced, or deep-merged), with no defaults and no migration. The real
// merge of every release is the remediate package's suite.

type mergeChecker struct {
	strategy containerdrelease.Strategy
	calls    int
}

func (c *mergeChecker) Dump(_ context.Context, main string) (map[string]any, error) {
	c.calls++
	files, err := LoadSet(main, nil)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for _, f := range files {
		doc, err := tomledit.Decode(stripBOM(f.Data))
		if err != nil {
			return nil, err
		}
		delete(doc, "imports")
		if c.strategy == containerdrelease.InPlace {
			// An imported plugin table replaces the one merged so far.
			if p, ok := doc["plugins"].(map[string]any); ok {
				merged, _ := out["plugins"].(map[string]any)
				if merged == nil {
					merged = map[string]any{}
				}
				for k, v := range p {
					merged[k] = v
				}
				delete(doc, "plugins")
				out["plugins"] = merged
			}
		}
		deepMerge(out, doc)
	}
	return out, nil
}

func deepMerge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				deepMerge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// row is a release line with the facts given, the rest as 2.0's.
func row(t *testing.T, line string, edit func(*containerdrelease.Release)) containerdrelease.Runtime {
	t.Helper()
	run, err := containerdrelease.Known.Lookup("v2.0.14")
	if err != nil {
		t.Fatal(err)
	}
	run.Line, run.Raw = line, "v"+line+".0"
	if edit != nil {
		edit(&run.Release)
	}
	return run
}

func planFor(t *testing.T, run containerdrelease.Runtime, main string) (Plan, Target, *mergeChecker, error) {
	t.Helper()
	dir := t.TempDir()
	tg := Target{Config: filepath.Join(dir, "etc", "config.toml"), DropInDir: filepath.Join(dir, "etc", "caa-gcp-t4"), DropInName: "kata-remote.toml"}
	if err := os.MkdirAll(filepath.Dir(tg.Config), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tg.Config, []byte(main), 0o644); err != nil {
		t.Fatal(err)
	}
	chk := &mergeChecker{strategy: run.Strategy}
	pl, err := Planner{Checker: chk, Run: run, Handler: KataDeployHandler(), Target: tg, KataDir: filepath.Join(dir, "kata"), Scratch: dir}.Plan(context.Background())
	return pl, tg, chk, err
}

const mainV2 = `version = 2
[plugins."io.containerd.grpc.v1.cri".containerd]
  discard_unpacked_layers = true
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`

const mainV3 = `version = 3
[plugins."io.containerd.cri.v1.images"]
  discard_unpacked_layers = true
[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
`

// TestPlanFollowsTheRowsStrategy: the row's strategy and CRI tables say
// where the handler goes: into the main file, key by key, or into a
// drop-in of its own imported by literal path.
func TestPlanFollowsTheRowsStrategy(t *testing.T) {
	inPlace := row(t, "1.7", func(r *containerdrelease.Release) {
		r.Strategy, r.CRI, r.MaxConfigVersion = containerdrelease.InPlace, containerdrelease.CRIConfigVersion2, 2
	})
	pl, tg, _, err := planFor(t, inPlace, mainV2)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Mode != containerdrelease.InPlace || len(pl.Changes) != 1 || pl.Changes[0].Path != tg.Config {
		t.Fatalf("in place: %+v, want config.toml changed alone", pl)
	}
	got := string(pl.Changes[0].New)
	if !strings.Contains(got, `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.kata-remote]`) || !strings.Contains(got, "discard_unpacked_layers = false") {
		t.Fatalf("in place: config.toml lacks the handler in the version 2 CRI table:\n%s", got)
	}

	pl, tg, _, err = planFor(t, row(t, "2.0", nil), mainV3)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Mode != containerdrelease.DropIn || len(pl.Changes) != 2 || pl.Changes[0].Path != tg.DropIn() || pl.Changes[1].Path != tg.Config {
		t.Fatalf("drop-in: %+v, want the drop-in, then the main file's import", pl)
	}
	drop := string(pl.Changes[0].New)
	for _, want := range []string{"version = 3", `[plugins."io.containerd.cri.v1.runtime".containerd.runtimes.kata-remote]`, `[plugins."io.containerd.cri.v1.images".runtime_platforms.kata-remote]`} {
		if !strings.Contains(drop, want) {
			t.Errorf("drop-in lacks %q:\n%s", want, drop)
		}
	}
	if err := tomledit.Verify([]byte(mainV3), pl.Changes[1].New, []tomledit.Change{{Key: "imports", Value: []any{tg.DropIn()}}}); err != nil {
		t.Errorf("main file: %v", err)
	}
}

// TestPlanRefusesWhatTheReleaseCannotLoad: before containerd is asked, a
// main file whose version the row's release does not read, one below
// version 2, and a row without a strategy are refused.
func TestPlanRefusesWhatTheReleaseCannotLoad(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  containerdrelease.Runtime
		main string
		want string
	}{
		{"newer than the release", row(t, "2.0", nil), "version = 4\n", "understands at most 3"},
		{"version 1", row(t, "2.0", nil), "version = 1\n", "only versions 2 and above"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, chk, err := planFor(t, tc.run, tc.main)
			if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tc.want) || chk.calls != 0 {
				t.Fatalf("err %v after %d checks, want %q before any", err, chk.calls, tc.want)
			}
		})
	}
	_, _, _, err := planFor(t, row(t, "2.0", func(r *containerdrelease.Release) { r.Strategy = "" }), mainV3)
	if !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "no strategy") {
		t.Fatalf("a row without a strategy: %v", err)
	}
}

// TestMergedVersionFollowsMigration: without per-file migration the last
// file's version wins; with it, the main file's.
func TestMergedVersionFollowsMigration(t *testing.T) {
	files := []LoadFile{{Version: 2}, {Version: 0}, {Version: 3}, {Version: 0}}
	if got := MergedVersion(row(t, "2.0", nil), files); got != 3 {
		t.Errorf("merged as %d without per-file migration, want 3", got)
	}
	if got := MergedVersion(row(t, "2.3", func(r *containerdrelease.Release) { r.MigratesEachFile = true }), files); got != 2 {
		t.Errorf("merged as %d with per-file migration, want the main file's 2", got)
	}
}

// TestDropInFollowsTheFilesVersion: the drop-in keeps the main file's
// version unless the release migrates each file and the main file is a
// version 2 one; a version 2 drop-in writes the version 2 CRI table.
func TestDropInFollowsTheFilesVersion(t *testing.T) {
	migrating := row(t, "2.3", func(r *containerdrelease.Release) { r.MigratesEachFile = true })
	for _, tc := range []struct {
		run        containerdrelease.Runtime
		main, want int
	}{{row(t, "2.0", nil), 2, 2}, {row(t, "2.0", nil), 3, 3}, {migrating, 2, 3}, {migrating, 4, 4}} {
		if got := dropInVersion(tc.run, tc.main); got != tc.want {
			t.Errorf("%s, main file version %d: drop-in version %d, want %d", tc.run.Line, tc.main, got, tc.want)
		}
	}
	v3 := containerdrelease.CRIConfigVersion3
	for _, tc := range []struct {
		key  []string
		want []string
	}{
		{slices.Concat(v3.Runtimes, []string{"kata-remote", "runtime_type"}), []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", "runtimes", "kata-remote", "runtime_type"}},
		{slices.Concat(v3.Images, []string{keyDiscardUnpackedLayers}), []string{"plugins", "io.containerd.grpc.v1.cri", "containerd", keyDiscardUnpackedLayers}},
		{slices.Concat(v3.RuntimePlatforms, []string{"kata-remote", "snapshotter"}), slices.Concat(v3.RuntimePlatforms, []string{"kata-remote", "snapshotter"})},
		{[]string{"proxy_plugins", "nydus", "address"}, []string{"proxy_plugins", "nydus", "address"}},
	} {
		if got := fileKey(tc.key, v3, 2); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("fileKey(%v, version 2) = %v, want %v", tc.key, got, tc.want)
		}
		if got := fileKey(tc.key, v3, 3); !reflect.DeepEqual(got, tc.key) {
			t.Errorf("fileKey(%v, version 3) = %v, want it unchanged", tc.key, got)
		}
	}
}

// TestKataDeployConfDModeIsTheRows: whether kata-deploy has retired its
// legacy drop-in follows the row's KataDeploy and the main file's imports.
func TestKataDeployConfDModeIsTheRows(t *testing.T) {
	config := "/etc/containerd/config.toml"
	imports := []string{"/etc/containerd/conf.d/*.toml"}
	confD := row(t, "2.2", func(r *containerdrelease.Release) { r.KataDeploy = containerdrelease.KataDeployConfD })
	if !confDMode(confD, config, imports) || confDMode(confD, config, nil) || confDMode(row(t, "2.0", nil), config, imports) {
		t.Fatal("conf.d mode: want it exactly for a conf.d row whose main file imports conf.d")
	}
}

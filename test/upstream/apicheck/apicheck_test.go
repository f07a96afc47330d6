package apicheck

import (
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range files {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

const forkAPI = `package provider

import "context"

type Provider interface {
	Create(ctx context.Context, name string) (*Instance, error)
	Delete(ctx context.Context, id string) error
}

type Instance struct {
	ID   string
	Spec Spec
}

type Spec struct{ GPUs int64 }

func Register(name string, p Provider) {}

type R struct{}

func NewR() *R { return nil }

func (r *R) Used(flagName, env string) {}

func (r *R) Unused(x uint64) {}
`

const forkUtil = `package util

const Prefix = "podvm"

func Name(pod string, max int) string { return Prefix + pod }
`

// The provider: what it names decides what is compared.
const providerSrc = `package p

import (
	"example.com/cp"
	u "example.com/cp/util"
)

func init() {
	provider.Register("p", nil)
	provider.NewR().Used("a", "b")
	_ = u.Name("x", 0)
}
`

func fork(t *testing.T) string {
	return writeTree(t, map[string]string{
		"go.mod":       "module example.com/cp\n\ngo 1.25\n",
		"api.go":       forkAPI,
		"util/util.go": forkUtil,
		"p/p.go":       providerSrc,
	})
}

func check(t *testing.T, upstreamAPI, upstreamUtil string) ([]Difference, []string, []string) {
	t.Helper()
	f := fork(t)
	files := map[string]string{"go.mod": "module example.com/cp\n\ngo 1.25\n", "api.go": upstreamAPI}
	if upstreamUtil != "" {
		files["util/util.go"] = upstreamUtil
	}
	up := writeTree(t, files)
	skip := func(rel string) bool { return rel == "p" }
	want, err := Extract(f, skip)
	if err != nil {
		t.Fatal(err)
	}
	got, err := Extract(up, skip)
	if err != nil {
		t.Fatal(err)
	}
	uses, err := ScanUses(f, filepath.Join(f, "p"))
	if err != nil {
		t.Fatal(err)
	}
	keys := want.Used(uses)
	diffs, adds := Compare(keys, want, got)
	return diffs, adds, keys
}

func TestUsedFollowsSignaturesAndSelectedMethods(t *testing.T) {
	_, _, keys := check(t, forkAPI, forkUtil)
	want := []string{
		"provider.(*R).Used", // selected; Unused is not
		"provider.Instance", "provider.Instance.ID", "provider.Instance.Spec",
		"provider.NewR", "provider.Provider", "provider.Provider.Create", "provider.Provider.Delete",
		"provider.R", "provider.Register",
		"provider.Spec", "provider.Spec.GPUs", // through Instance.Spec
		"util.Name",
	}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("used declarations:\n got %q\nwant %q", keys, want)
	}
}

func TestParameterNamesAndUnusedMethodsDoNotCount(t *testing.T) {
	up := strings.NewReplacer(
		"flagName, env string", "name string, envVar string",
		"ctx context.Context, name string", "c context.Context, n string",
		"func (r *R) Unused(x uint64) {}", "",
		"ID   string", "ID     string\n\tLabels map[string]string",
	).Replace(forkAPI)
	diffs, adds, _ := check(t, up, forkUtil)
	if len(diffs) != 0 {
		t.Errorf("want no differences, got %v", diffs)
	}
	if !slices.Equal(adds, []string{"provider.Instance.Labels map[string]string"}) {
		t.Errorf("want the added field noted, got %q", adds)
	}
}

func TestDifferencesAreNamed(t *testing.T) {
	up := strings.NewReplacer(
		"Delete(ctx context.Context, id string) error", "Delete(ctx context.Context, id string) error\n\tClose() error",
		"GPUs int64", "GPUs int32",
	).Replace(forkAPI)
	diffs, _, _ := check(t, up, "package util\n")
	got := map[string]Difference{}
	for _, d := range diffs {
		got[d.Key] = d
	}
	want := map[string]Difference{
		"provider.Provider":  {Key: "provider.Provider", Want: "interface{Create; Delete}", Got: "interface{Close; Create; Delete}"},
		"provider.Spec.GPUs": {Key: "provider.Spec.GPUs", Want: "int64", Got: "int32"},
		"util.Name":          {Key: "util.Name", Want: "func(string, int) string"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("differences:\n got %+v\nwant %+v", got, want)
	}
	if s := got["util.Name"].String(); !strings.HasPrefix(s, "missing  util.Name") {
		t.Errorf("a missing declaration reads %q", s)
	}
}

// Upstream has many provider packages; one with the same package name as
// a compared one must not stand in for it.
func TestSamePackageNameElsewhereDoesNotCount(t *testing.T) {
	f := fork(t)
	up := writeTree(t, map[string]string{
		"go.mod":             "module example.com/cp\n\ngo 1.25\n",
		"api.go":             forkAPI,
		"util/util.go":       "package util\n",
		"aws/util/helper.go": forkUtil, // package util too, with Name
	})
	skip := func(rel string) bool { return rel == "p" }
	want, _ := Extract(f, skip)
	got, err := Extract(up, skip)
	if err != nil {
		t.Fatal(err)
	}
	uses, _ := ScanUses(f, filepath.Join(f, "p"))
	diffs, _ := Compare(want.Used(uses), want, got)
	if len(diffs) != 1 || diffs[0].Key != "util.Name" || diffs[0].Got != "" {
		t.Errorf("want util.Name missing, got %v", diffs)
	}
}

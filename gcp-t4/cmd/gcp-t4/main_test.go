package main

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"testing"
)

func TestUnknownCommandIsUsageError(t *testing.T) {
	var out, errb bytes.Buffer
	if code := program().Run([]string{"frobnicate"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), `unknown command "frobnicate"`) {
		t.Fatalf("code %d, stderr %q", code, errb.String())
	}
}

func TestCommands(t *testing.T) {
	got := slices.Sorted(maps.Keys(program().Commands))
	want := []string{"adaptor", "demo", "gc", "install", "plan", "preflight", "reaper", "uninstall"}
	if !slices.Equal(got, want) {
		t.Fatalf("commands %v, want %v", got, want)
	}
}

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

// Every command's -h is help, not an error: exit 0 and a usage text, and
// the top-level summary of install names the flag that prints the YAML.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	for name := range program().Commands {
		var out, errb bytes.Buffer
		code := program().Run([]string{name, "-h"}, &out, &errb)
		text := out.String() + errb.String()
		if code != 0 || !strings.Contains(strings.ToLower(text), "usage") || strings.Contains(text, "help requested") {
			t.Errorf("gcp-t4 %s -h: exit %d\n%s", name, code, text)
		}
	}
	var out, errb bytes.Buffer
	program().Run([]string{"help"}, &out, &errb)
	if !strings.Contains(out.String(), "--render prints the YAML") || strings.Contains(out.String(), "--dry-run prints the YAML") {
		t.Errorf("top-level help says which install flag prints the YAML wrongly:\n%s", out.String())
	}
}

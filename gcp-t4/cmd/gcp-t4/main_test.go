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
	want := []string{"adaptor", "demo", "gc", "install", "plan", "preflight", "reaper", "status", "uninstall"}
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

// TestStatusHelp: the top-level help lists status with what it shows, and
// `gcp-t4 status -h` is its own short usage (no provider flags), on
// stdout with exit 0.
func TestStatusHelp(t *testing.T) {
	var out, errb bytes.Buffer
	if code := program().Run([]string{"help"}, &out, &errb); code != 0 {
		t.Fatalf("help: exit %d", code)
	}
	var line string
	for l := range strings.SplitSeq(out.String(), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "status" {
			line = l
		}
	}
	for _, want := range []string{"start-up Events", "cost so far", "-o json"} {
		if !strings.Contains(line, want) {
			t.Errorf("top-level help's status line %q lacks %q", line, want)
		}
	}
	out.Reset()
	errb.Reset()
	if code := program().Run([]string{"status", "-h"}, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("status -h: exit %d, stderr %q", code, errb.String())
	}
	help := out.String()
	if !strings.HasPrefix(help, "usage: gcp-t4 status [-kubeconfig FILE] [-n NAMESPACE | -A]") || strings.Count(help, "\n") > 25 || strings.Contains(help, "gcp-project-id") {
		t.Errorf("status -h is not its short usage:\n%s", help)
	}
}

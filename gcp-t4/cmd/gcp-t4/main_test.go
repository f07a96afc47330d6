package main

import (
	"bytes"
	"encoding/json"
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
	want := []string{"adaptor", "cache", "demo", "emulator", "gc", "install", "plan", "preflight", "reaper", "status", "uninstall"}
	if !slices.Equal(got, want) {
		t.Fatalf("commands %v, want %v", got, want)
	}
}

// Every command's -h is help, not an error: exit 0, a usage text that
// starts by saying what the command does (its line of the top-level
// help), short, with no provider setting described in full where the
// command passes them all on (the ~35 of them once made gc -h, plan -h and
// preflight -h 80 to 105 lines); and the top-level summary of install
// names the flag that prints the YAML.
func TestEveryCommandHelpExitsZero(t *testing.T) {
	for _, name := range slices.Sorted(maps.Keys(program().Commands)) {
		for _, h := range []string{"-h", "--help"} {
			var out, errb bytes.Buffer
			code := program().Run([]string{name, h}, &out, &errb)
			text := out.String() + errb.String()
			if code != 0 || !strings.Contains(strings.ToLower(text), "usage") || strings.Contains(text, "help requested") {
				t.Errorf("gcp-t4 %s %s: exit %d\n%s", name, h, code, text)
			}
			summary := "gcp-t4 " + name + ": " + program().Commands[name].Summary + "\n"
			if !strings.HasPrefix(out.String(), summary) && !strings.HasPrefix(errb.String(), summary) {
				t.Errorf("gcp-t4 %s %s does not start with what the command does (%q):\n%s", name, h, summary, text)
			}
			// install lists 25 flags of its own, two lines each.
			if n := strings.Count(text, "\n"); n > 70 {
				t.Errorf("gcp-t4 %s %s is %d lines; want it short:\n%s", name, h, n, text)
			}
			// -use-public-ip's and -disk-type's usage: no command lists
			// them in full (plan, preflight and the adaptor list the
			// provider's settings by name, gc and the reaper only those
			// they read).
			for _, full := range []string{"Refused: podVMs never get an external IP", "Boot disk type (pd-standard"} {
				if strings.Contains(text, full) {
					t.Errorf("gcp-t4 %s %s describes a provider setting in full (%q): list them by name, or only those the command reads:\n%s", name, h, full, text)
				}
			}
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
	// The help opens with the command's summary line (cli), then its usage.
	if !strings.HasPrefix(help, "gcp-t4 status: ") || !strings.Contains(help, "\nusage: gcp-t4 status [-kubeconfig FILE] [-n NAMESPACE | -A]") || strings.Count(help, "\n") > 30 || strings.Contains(help, "gcp-project-id") {
		t.Errorf("status -h is not its short usage:\n%s", help)
	}
}

// TestDemoPrintsNoLogLines: gcp-t4 demo's output is its narration and
// tables; the log of the adaptor, provider and reaper follows on stderr in
// text form, never a JSON record in the middle of the table (the
// adaptor's warning at shutdown once was).
func TestDemoPrintsNoLogLines(t *testing.T) {
	var out, errb bytes.Buffer
	if code := program().Run([]string{"demo"}, &out, &errb); code != 0 {
		t.Fatalf("gcp-t4 demo: exit %d\n%s\n%s", code, out.String(), errb.String())
	}
	for name, text := range map[string]string{"stdout": out.String(), "stderr": errb.String()} {
		for _, line := range strings.Split(text, "\n") {
			var rec map[string]any
			if json.Unmarshal([]byte(strings.TrimSpace(line)), &rec) == nil {
				t.Errorf("gcp-t4 demo's %s carries a JSON log record: %s", name, line)
			}
			if name == "stdout" && strings.Contains(line, "level=") {
				t.Errorf("gcp-t4 demo's stdout carries a log line: %s", line)
			}
		}
	}
	if !strings.Contains(out.String(), "Instances left in demo-project: 0") || !strings.Contains(errb.String(), "level=WARN") {
		t.Errorf("want the demo's tables on stdout and its held log after them on stderr:\n%s\n---\n%s", out.String(), errb.String())
	}
}

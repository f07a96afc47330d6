package main

import (
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli/clitest"
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

// TestHelpWalk walks every command and subcommand as a new user does
// (clitest.Walk: -h, --help, -nope, a stray argument) and checks each
// help is short, with no provider setting described in full where the
// command passes them all on (the ~35 of them once made gc -h, plan -h
// and preflight -h 80 to 105 lines); and the top-level summary of install
// names the flag that prints the YAML.
func TestHelpWalk(t *testing.T) {
	run := func(args []string, stdout, stderr io.Writer) int { return program().Run(args, stdout, stderr) }
	// cache initdata and status take arguments (images, a pod); the demo
	// passes its flags to the adaptor it starts after its emulator, so
	// only its -h is walked, which starts nothing.
	walked := clitest.Walk(t, "gcp-t4", run, []string{"version"}, []string{"cache build", "cache initdata", "status"}, []string{"demo"})
	want := []string{"", "adaptor", "cache", "cache build", "cache check", "cache initdata", "cache model", "demo", "emulator", "gc", "install", "plan", "plan serve", "preflight", "reaper", "status", "uninstall"}
	if slices.Sort(walked); !slices.Equal(walked, want) {
		t.Errorf("walked %q, want %q", walked, want)
	}
	for _, path := range walked {
		var out, errb bytes.Buffer
		program().Run(append(strings.Fields(path), "-h"), &out, &errb)
		text := out.String()
		// install lists 26 flags of its own, two lines each.
		if n := strings.Count(text, "\n"); n > 70 {
			t.Errorf("gcp-t4 %s -h is %d lines; want it short:\n%s", path, n, text)
		}
		// -use-public-ip's and -disk-type's usage: no command lists
		// them in full (plan, preflight and the adaptor list the
		// provider's settings by name, gc and the reaper only those
		// they read).
		for _, full := range []string{"Refused: podVMs never get an external IP", "Boot disk type (pd-standard"} {
			if strings.Contains(text, full) {
				t.Errorf("gcp-t4 %s -h describes a provider setting in full (%q): list them by name, or only those the command reads:\n%s", path, full, text)
			}
		}
	}
	var out, errb bytes.Buffer
	program().Run([]string{"help"}, &out, &errb)
	if !strings.Contains(out.String(), "--render prints the YAML") || strings.Contains(out.String(), "--dry-run prints the YAML") {
		t.Errorf("top-level help says which install flag prints the YAML wrongly:\n%s", out.String())
	}
}

// TestHelpRegressions: what a new user found wrong, each once.
func TestHelpRegressions(t *testing.T) {
	help := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := program().Run(args, &out, &errb)
		return code, out.String(), errb.String()
	}
	// cache -h printed only cache build's help.
	if _, out, _ := help("cache", "-h"); !slices.Equal(clitest.Commands(out), []string{"build", "check", "initdata", "model"}) || strings.Contains(out, "usage: gcp-t4 cache build") {
		t.Errorf("gcp-t4 cache -h does not list its commands alone:\n%s", out)
	}
	for _, sub := range []string{"build", "initdata", "check", "model"} {
		if _, out, _ := help("cache", sub, "-h"); !strings.HasPrefix(out, "usage: gcp-t4 cache "+sub+" ") {
			t.Errorf("gcp-t4 cache %s -h is not its own usage:\n%s", sub, out)
		}
	}
	// plan serve -h had plan's header, then Go's "Usage of".
	if _, out, _ := help("plan", "serve", "-h"); !strings.HasPrefix(out, "usage: gcp-t4 plan serve ") || strings.Contains(out, "Usage of") || strings.Contains(out, "gcp-t4 plan: ") {
		t.Errorf("gcp-t4 plan serve -h is not its own usage:\n%s", out)
	}
	// uninstall -h was Go's default layout.
	if _, out, _ := help("uninstall", "-h"); !strings.HasPrefix(out, "usage: gcp-t4 uninstall ") || strings.Contains(out, "Usage of") || !strings.Contains(out, "\nflags:\n") {
		t.Errorf("gcp-t4 uninstall -h is not in the common layout:\n%s", out)
	}
	// reaper -h said -delete was "(gc's default: only list them) (default true)".
	if _, out, _ := help("reaper", "-h"); strings.Contains(out, "gc's default") || !strings.Contains(out, "-delete=false only lists them") || strings.Contains(out, "0 runs once") {
		t.Errorf("gcp-t4 reaper -h does not describe the reaper's own defaults:\n%s", out)
	}
	if _, out, _ := help("gc", "-h"); strings.Contains(out, "(default true)") || !strings.Contains(out, "without it gc only lists them") {
		t.Errorf("gcp-t4 gc -h does not describe gc's own defaults:\n%s", out)
	}
	// demo -nope started the emulator and exited 1: the demo's flags are
	// checked first, as misuse.
	if code, out, errs := help("demo", "-nope"); code != 2 || out != "" || !strings.Contains(errs, "gcp-t4 demo: flag provided but not defined: -nope") || !strings.Contains(errs, "usage: gcp-t4 demo") {
		t.Errorf("gcp-t4 demo -nope: exit %d, stdout %q, stderr:\n%s\nwant exit 2, the flag named, then the usage, on stderr", code, out, errs)
	}
	// install rolled CAA, and every peer pod with it, unannounced: its
	// help names the refusal and the flag that overrides it.
	if _, out, _ := help("install", "-h"); !strings.Contains(out, "-restart-peer-pods\n") || !strings.Contains(out, "refused without --restart-peer-pods") {
		t.Errorf("gcp-t4 install -h does not say that a change restarting peer pods is refused, nor the flag:\n%s", out)
	}
	// --version was an unknown command.
	for _, v := range []string{"version", "--version", "-version"} {
		if code, out, errb := help(v); code != 0 || out != version+"\n" || errb != "" {
			t.Errorf("gcp-t4 %s: exit %d, stdout %q, stderr %q; want 0 and %q", v, code, out, errb, version)
		}
	}
	// plan with no workload planned a 0-vCPU pod and exited 0.
	if code, out, errb := help("plan"); code != 2 || out != "" || !strings.HasPrefix(errb, "gcp-t4 plan: nothing to plan: give a manifest (-f FILE") || !strings.Contains(errb, "\nusage: gcp-t4 plan ") {
		t.Errorf("gcp-t4 plan with no workload: exit %d, stdout %q, stderr:\n%s\nwant exit 2, the problem and the usage on stderr", code, out, errb)
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
	if !strings.HasPrefix(help, "usage: gcp-t4 status [-kubeconfig FILE] [-n NAMESPACE | -A]") || strings.Count(help, "\n") > 30 || strings.Contains(help, "gcp-project-id") {
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

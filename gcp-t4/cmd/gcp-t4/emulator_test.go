package main

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/demo"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

// emulatorRun is one `gcp-t4 emulator` in the background: what it printed
// up to its ready line, the commands in it, and how to stop it.
type emulatorRun struct {
	printed  string
	commands []string
	dir      string // its temporary directory, from the ready line
	stop     func() (code int, rest string)
}

var readyDirRE = regexp.MustCompile(`then the servers stop and (\S+) is removed\.`)

// startEmulator runs args (`gcp-t4 emulator` as the docs give it) through
// the binary's own command table, with a context the test cancels as
// Ctrl-C would, and reads its output up to the ready line.
func startEmulator(t *testing.T, args []string) *emulatorRun {
	t.Helper()
	if len(args) < 2 || args[0] != "gcp-t4" {
		t.Fatalf("not a gcp-t4 command: %q", args)
	}
	cmd, ok := program().Commands[args[1]]
	if !ok {
		t.Fatalf("no command %q", args[1])
	}
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	var errb bytes.Buffer
	done := make(chan int, 1)
	go func() {
		code := cmd.Run(ctx, args[2:], pw, &errb, nil)
		pw.Close()
		done <- code
	}()
	r := &emulatorRun{}
	sc := bufio.NewScanner(pr)
	var printed strings.Builder
	inCommands := false
	for sc.Scan() {
		line := sc.Text()
		printed.WriteString(line + "\n")
		switch {
		case strings.HasPrefix(line, "Run these against it"):
			inCommands = true
		case strings.HasPrefix(line, demo.ReadyLine):
			inCommands = false
			if m := readyDirRE.FindStringSubmatch(line); m != nil {
				r.dir = m[1]
			}
		case inCommands && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "  #"):
			r.commands = append(r.commands, strings.TrimSpace(line))
		}
		if strings.HasPrefix(line, demo.ReadyLine) {
			break
		}
	}
	r.printed = printed.String()
	if !strings.Contains(r.printed, demo.ReadyLine) {
		cancel()
		t.Fatalf("gcp-t4 emulator ended before it was ready: exit %d\n%s\nstderr:\n%s", <-done, r.printed, errb.String())
	}
	rest := make(chan string, 1)
	go func() { b, _ := io.ReadAll(pr); rest <- string(b) }()
	stopped := false
	r.stop = func() (int, string) {
		stopped = true
		cancel()
		code := <-done
		return code, <-rest + errb.String()
	}
	t.Cleanup(func() {
		if !stopped {
			r.stop()
		}
	})
	return r
}

// runPrinted runs one printed command exactly as printed: its leading
// NAME=VALUE words become the environment of that command only, the rest
// goes through the binary's dispatch.
func runPrinted(t *testing.T, line string) (code int, stdout, stderr string) {
	t.Helper()
	words, err := doccmd.Fields(line, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatalf("%s: %v", line, err)
	}
	for len(words) > 0 && strings.Contains(words[0], "=") && !strings.HasPrefix(words[0], "-") {
		name, value, _ := strings.Cut(words[0], "=")
		old, had := os.LookupEnv(name)
		os.Setenv(name, value)
		defer func() {
			if had {
				os.Setenv(name, old)
			} else {
				os.Unsetenv(name)
			}
		}()
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "gcp-t4" {
		t.Fatalf("printed command %q does not run gcp-t4", line)
	}
	var out, errb bytes.Buffer
	code = program().Run(words[1:], &out, &errb)
	return code, out.String(), errb.String()
}

// clearCloudEnv keeps the machine's own project, cluster and control
// plane out of the emulator's commands.
func clearCloudEnv(t *testing.T) {
	for _, v := range []string{"GCP_PROJECT_ID", "GCP_ZONE", "GCP_ZONES", "PODVM_IMAGE_NAME", "GCP_NETWORK", "GCP_SUBNETWORK", "GCP_CREDENTIALS",
		"GCP_CLUSTER_ID", "GCP_ENDPOINT", "KUBECONFIG", "GOOGLE_APPLICATION_CREDENTIALS"} {
		t.Setenv(v, "")
	}
}

// emulatorDocCommand is `gcp-t4 emulator` as docs/emulator.md gives it.
func emulatorDocCommand(t *testing.T) []string {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join("..", "..", "..", "docs", "emulator.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, steps := doccmd.Marked(blocks, "step")
	cmds := steps["emulator"]
	if len(cmds) != 1 {
		t.Fatalf("docs/emulator.md: want one command under <!-- step: emulator -->, got %d", len(cmds))
	}
	args, err := doccmd.Fields(cmds[0].Text, func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// TestEmulatorWithoutAPIServer: without the control plane's binaries the
// emulator says which are missing and how to build them, serves GCE only
// and prints preflight alone, which passes its project checks against
// it as printed; Ctrl-C stops it with exit 0 and removes its directory.
func TestEmulatorWithoutAPIServer(t *testing.T) {
	clearCloudEnv(t)
	t.Setenv("CONTROLPLANE_KUBE_APISERVER", "")
	t.Setenv("CONTROLPLANE_ETCD", "")
	em := startEmulator(t, emulatorDocCommand(t))
	for _, want := range []string{"API server: not started", "CONTROLPLANE_KUBE_APISERVER is not set", "make controlplane", "GCE only",
		"podVMs: 2 created", "podvm-mistral-tp-0-", "podvm-mistral-tp-1-"} {
		if !strings.Contains(em.printed, want) {
			t.Errorf("the emulator's output lacks %q:\n%s", want, em.printed)
		}
	}
	if len(em.commands) != 1 || !strings.HasPrefix(em.commands[0], "gcp-t4 preflight ") {
		t.Fatalf("want preflight alone without an API server, got %q", em.commands)
	}
	checkPreflight(t, em.commands[0])
	code, rest := em.stop()
	if code != 0 || !strings.Contains(rest, "Stopping:") {
		t.Errorf("stopped: exit %d\n%s", code, rest)
	}
	if _, err := os.Stat(em.dir); em.dir == "" || !os.IsNotExist(err) {
		t.Errorf("the emulator's directory %q is left: %v", em.dir, err)
	}
}

// checkPreflight runs the printed preflight: every project check passes
// against the emulator's project, Cloud NAT and image included.
func checkPreflight(t *testing.T, line string) {
	t.Helper()
	code, out, errOut := runPrinted(t, line)
	if code != 0 || !strings.Contains(out, " 0 failed") {
		t.Errorf("%s: exit %d\n%s%s", line, code, out, errOut)
	}
	for _, want := range []string{"pass  credentials", "pass  quota NVIDIA_T4_GPUS in us-central1", "pass  cloud nat in us-central1", "pass  image podvm-t4",
		"pass  accelerator nvidia-tesla-t4 in us-central1-b"} {
		if !strings.Contains(out, want) {
			t.Errorf("%s: no %q in\n%s", line, want, out)
		}
	}
}

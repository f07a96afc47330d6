package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/test/controlplane"
	"github.com/caa-gcp-t4/test/controlplane/doccmd"
)

var (
	endpointRE = regexp.MustCompile(`http://127\.0\.0\.1:\d+`)
	kubeRE     = regexp.MustCompile(`-kubeconfig (\S+)`)
)

// TestEmulatorCommandsRunAsPrinted: with the control plane's binaries,
// `gcp-t4 emulator` as docs/emulator.md gives it serves GCE and a
// kube-apiserver, prints the preflight, status, gc, install --dry-run and
// uninstall commands (those the page shows, but for the port, directory
// and UID), and each, run exactly as printed, succeeds and says what is
// true of the emulator's world: preflight passes its project checks,
// status shows both demo pods' podVMs reachable and running, gc (its
// settings, GCP_ENDPOINT included, from the installed peer-pods-cm) finds
// both in use and deletes nothing, install --dry-run finds the
// emulator's own install unchanged, uninstall refuses while the pods and
// podVMs are live.
// Ctrl-C then stops it and removes its directory, kubeconfig included.
func TestEmulatorCommandsRunAsPrinted(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a real kube-apiserver and etcd (make controlplane); skipped under -short")
	}
	// As controlplane.StartForTest: missing binaries fail the test with
	// the command that builds them.
	if _, err := controlplane.BinariesFromEnv(); err != nil {
		t.Fatal(err)
	}
	clearCloudEnv(t)
	em := startEmulator(t, emulatorDocCommand(t))
	if !strings.Contains(em.printed, "API server: https://127.0.0.1:") || !strings.Contains(em.printed, "CAA: installed by gcp-t4 install") ||
		!strings.Contains(em.printed, "their PeerPods, and the start-up Events") {
		t.Fatalf("the emulator did not start its API server:\n%s", em.printed)
	}
	var names []string
	var kubeconfig string
	for _, c := range em.commands {
		f := strings.Fields(c)
		for len(f) > 0 && strings.Contains(f[0], "=") {
			f = f[1:]
		}
		names = append(names, f[1])
		if m := kubeRE.FindStringSubmatch(c); m != nil {
			kubeconfig = m[1]
		}
	}
	if strings.Join(names, " ") != "preflight status gc install uninstall" {
		t.Fatalf("printed commands %q: want preflight, status, gc, install, uninstall", em.commands)
	}
	compareWithDoc(t, em.commands, kubeconfig)

	checkPreflight(t, em.commands[0])

	code, out, errOut := runPrinted(t, em.commands[1])
	if code != 0 {
		t.Errorf("status: exit %d\n%s%s", code, out, errOut)
	}
	for _, want := range []string{"default/mistral-tp-0", "default/mistral-tp-1", "podvm-mistral-tp-0-", "requested", "created", "booted", "reachable", "GCE RUNNING"} {
		if !strings.Contains(out, want) {
			t.Errorf("status lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = runPrinted(t, em.commands[2])
	if code != 0 || strings.Count(out, " in-use ") != 2 || strings.Contains(out, "orphan") || strings.Contains(out, "deleted") || !strings.Contains(errOut, "GCP_ENDPOINT") {
		t.Errorf("gc: exit %d, want both podVMs in-use and nothing to delete\n%s%s", code, out, errOut)
	}

	code, out, errOut = runPrinted(t, em.commands[3])
	// With the demo's kata-remote pods live, an unchanged install must
	// not read as a restart of CAA (install's roll check).
	if code != 0 || !strings.Contains(out, "settings: no change") || !strings.Contains(out, "(0 would change); nothing was changed") ||
		strings.Contains(out+errOut, "restarts CAA") {
		t.Errorf("install --dry-run: exit %d, want the emulator's install unchanged, restarting nothing\n%s%s", code, out, errOut)
	}

	// Refused, and says why: the demo's pods and their podVMs are live.
	code, out, errOut = runPrinted(t, em.commands[4])
	if code != 1 || !strings.Contains(errOut, "refusing to uninstall; nothing was deleted: 2 kata-remote pod(s) are running and 2 podVM(s) of this cluster exist") ||
		!strings.Contains(errOut, "pod default/mistral-tp-1") || !strings.Contains(errOut, "podVM zones/us-central1-a/instances/podvm-mistral-tp-0-") {
		t.Errorf("uninstall --dry-run: exit %d, want its refusal naming the live pods and podVMs\n%s%s", code, out, errOut)
	}

	code, rest := em.stop()
	if code != 0 {
		t.Errorf("stopped: exit %d\n%s", code, rest)
	}
	for _, p := range []string{em.dir, kubeconfig} {
		if _, err := os.Stat(p); p == "" || !os.IsNotExist(err) {
			t.Errorf("%q is left after Ctrl-C: %v", p, err)
		}
	}
}

// compareWithDoc: the commands docs/emulator.md shows are those printed,
// with the port and the kubeconfig's directory as PORT and DIR.
func compareWithDoc(t *testing.T, printed []string, kubeconfig string) {
	t.Helper()
	blocks, err := doccmd.File(filepath.Join("..", "..", "..", "docs", "emulator.md"))
	if err != nil {
		t.Fatal(err)
	}
	b, ok := doccmd.ByMarker(blocks, "output: emulator")
	if !ok {
		t.Fatal("docs/emulator.md has no <!-- output: emulator --> block")
	}
	var doc []string
	for _, line := range strings.Split(b.Text, "\n") {
		if strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "  #") {
			doc = append(doc, strings.TrimSpace(line))
		}
	}
	var got []string
	for _, c := range printed {
		c = endpointRE.ReplaceAllString(c, "http://127.0.0.1:PORT")
		if kubeconfig != "" {
			c = strings.ReplaceAll(c, filepath.Dir(kubeconfig), "DIR")
		}
		got = append(got, c)
	}
	if strings.Join(doc, "\n") != strings.Join(got, "\n") {
		t.Errorf("docs/emulator.md's commands:\n%s\nthe emulator printed:\n%s", strings.Join(doc, "\n"), strings.Join(got, "\n"))
	}
}

package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

func TestDemoShowsPrivateT4PodVMsAndTheReaper(t *testing.T) {
	var out, logs bytes.Buffer
	if err := Run(context.Background(), nil, &out, &logs); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	text := out.String()
	rows := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "mistral-tp-") {
			continue
		}
		rows++
		f := strings.Fields(line)
		// POD INSTANCE MACHINE-TYPE N x ACCELERATOR ZONE IP EXTERNAL
		if len(f) != 9 || f[2] != "n1-standard-4" || f[5] != "nvidia-tesla-t4" || f[8] != "none" {
			t.Errorf("row %q: want n1-standard-4, 1 x nvidia-tesla-t4 and external IP none", line)
		}
		// The instance name comes from the CRI sandbox-name annotation and
		// the sandbox ID the shim sent over the socket.
		if len(f) == 9 && !strings.HasPrefix(f[1], "podvm-"+f[0]+"-") {
			t.Errorf("row %q: instance %s is not named after pod %s", line, f[1], f[0])
		}
	}
	if rows != 2 {
		t.Errorf("want 2 podVM rows, got %d:\n%s", rows, text)
	}
	if !strings.Contains(text, "Instances left in demo-project: 0") {
		t.Errorf("demo does not show that nothing is left:\n%s", text)
	}
	// The adaptor leaves the live sandbox's VM at shutdown, as upstream
	// CAA does, and the reaper's pass shows it deleted.
	if !strings.Contains(text, "it left 1 podVM running") {
		t.Errorf("demo does not show the adaptor leaving the live VM:\n%s", text)
	}
	reaped := false
	for _, line := range strings.Split(text, "\n") {
		f := strings.Fields(line)
		reaped = reaped || (len(f) > 4 && strings.Contains(f[0], "/instances/podvm-mistral-tp-1-") && f[1] == "default/mistral-tp-1" && f[4] == "deleted")
	}
	if !reaped || !strings.Contains(text, "Reaped 1 podVM; PeerPod finalizers released: 1.") {
		t.Errorf("demo does not show the reaper deleting mistral-tp-1's VM and releasing its PeerPod:\n%s", text)
	}
}

func TestDemoPassesProviderFlags(t *testing.T) {
	var out bytes.Buffer
	err := Run(context.Background(), []string{"-provisioning-model", "CHEAP"}, &out, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "GCP_PROVISIONING_MODEL") {
		t.Fatalf("want the provider's validation error, got %v", err)
	}
}

// TestDemoOutputHasNoLogLines: the demo's stdout is narration and tables
// only. The adaptor's warning at shutdown (it leaves the live sandbox's VM)
// once landed in the middle of the output as a raw JSON record; the log
// now comes after the demo, in text form, on the other writer.
func TestDemoOutputHasNoLogLines(t *testing.T) {
	var out, logs bytes.Buffer
	if err := Run(context.Background(), nil, &out, &logs); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	for _, line := range strings.Split(out.String(), "\n") {
		if isLogLine(line) {
			t.Errorf("the demo's output carries a log line: %q", line)
		}
	}
	l := logs.String()
	if !strings.Contains(l, "level=WARN") || !strings.Contains(l, "shutting down with live sandboxes") {
		t.Errorf("the adaptor's warning is not in the held log:\n%s", l)
	}
	for _, line := range strings.Split(l, "\n") {
		if isJSONObject(line) || strings.Contains(line, "time=") {
			t.Errorf("held log line %q: want text without the time", line)
		}
	}
}

// isLogLine: a JSON record or a slog text record (level=...).
func isLogLine(line string) bool {
	return isJSONObject(line) || strings.Contains(line, "level=")
}

func isJSONObject(line string) bool {
	var v map[string]any
	return json.Unmarshal([]byte(strings.TrimSpace(line)), &v) == nil
}

// TestDemoEndsWithItsSummary: the demo's last line says what it showed,
// the leak scenario included, and the held log explains the adaptor's
// warning as that scenario's expected outcome. The stopped pod is gone
// with its sandbox, so the reaper finds no podVM lost under a live pod
// (its warning once ended the demo and read as a failure).
func TestDemoEndsWithItsSummary(t *testing.T) {
	var out, logs bytes.Buffer
	if err := Run(context.Background(), nil, &out, &logs); err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{"demo: 2 podVMs created with 1 T4 each, private IPs only", "mistral-tp-0's deleted by its StopVM",
		"leak scenario: the adaptor stopped with mistral-tp-1 live and left its podVM", "the reaper deleted that podVM", "0 instances left."} {
		if !strings.Contains(last, want) {
			t.Errorf("last line %q lacks %q", last, want)
		}
	}
	l := logs.String()
	if !strings.Contains(l, "The adaptor's warning about live sandboxes is the leak scenario's expected outcome") {
		t.Errorf("the held log does not explain the adaptor's warning:\n%s", l)
	}
	if strings.Contains(l, "gone from GCE") {
		t.Errorf("the reaper warned of a podVM lost under a live pod:\n%s", l)
	}
	if n := strings.Count(l, "level=WARN"); n != 1 {
		t.Errorf("%d warnings held, want the adaptor's one:\n%s", n, l)
	}
}

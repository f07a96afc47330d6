package tomledit

import (
	"bytes"
	"errors"
	"os"
	"strings"
	"testing"
)

var cri = []string{"plugins", "io.containerd.grpc.v1.cri", "containerd"}

func kataChanges() []Change {
	rt := append(append([]string(nil), cri...), "runtimes", "kata-remote")
	return []Change{
		{Table: cri, Key: "disable_snapshot_annotations", Value: false},
		{Table: cri, Key: "discard_unpacked_layers", Value: false},
		{Table: rt, Key: "runtime_type", Value: "io.containerd.kata-remote.v2"},
		{Table: rt, Key: "pod_annotations", Value: []any{"io.katacontainers.*"}},
		{Table: rt, Key: "snapshotter", Value: "nydus"},
		{Table: append(append([]string(nil), rt...), "options"), Key: "ConfigPath", Value: "/opt/kata/configuration-remote.toml"},
		{Table: []string{"proxy_plugins", "nydus"}, Key: "type", Value: "snapshot"},
		{Table: []string{"proxy_plugins", "nydus"}, Key: "address", Value: "/run/nydus.sock"},
	}
}

func TestApplyKeepsEverythingElse(t *testing.T) {
	src, err := os.ReadFile("testdata/gke-v2.toml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := Apply(src, kataChanges(), Render)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	text := string(out)
	// Every original line is still there, in order, except the one value
	// that had to change.
	rest := text
	for _, line := range strings.Split(string(src), "\n") {
		if strings.Contains(line, "discard_unpacked_layers") {
			line = strings.Replace(line, "true", "false", 1)
		}
		i := strings.Index(rest, line)
		if i < 0 {
			t.Fatalf("line %q lost or moved in:\n%s", line, text)
		}
		rest = rest[i+len(line):]
	}
	for _, want := range []string{
		"  disable_snapshot_annotations = false\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]",
		"[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.kata-remote]\n  runtime_type = \"io.containerd.kata-remote.v2\"\n",
		"[proxy_plugins.nydus]\n  type = \"snapshot\"\n  address = \"/run/nydus.sock\"\n",
		`bin_dir = "/home/kubernetes/bin" # GKE's CNI plugins live here`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("output lacks %q:\n%s", want, text)
		}
	}
	again, err := Apply(out, kataChanges(), Render)
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if !bytes.Equal(again, out) {
		t.Errorf("second Apply changed the document:\n%s", again)
	}
}

func TestApplyRefusesMalformed(t *testing.T) {
	src := []byte("version = 2\n[plugins\nx = 1\n")
	if _, err := Apply(src, kataChanges(), Render); err == nil || !strings.Contains(err.Error(), "left untouched") {
		t.Fatalf("Apply on malformed TOML: err = %v, want a 'left untouched' error", err)
	}
}

func TestSetEdgeCases(t *testing.T) {
	for _, tc := range []struct {
		name, src string
		table     []string
		key, val  string
		want      string
		wantErr   error
	}{
		{"empty document, root key", "", nil, "version", "2", "version = 2\n", nil},
		{"root key before first table", "# head\n[a]\nx = 1\n", nil, "imports", `["b"]`, "# head\nimports = [\"b\"]\n[a]\nx = 1\n", nil},
		{"root key after root keys", "version = 2\n\n[a]\n", nil, "imports", "[]", "version = 2\nimports = []\n\n[a]\n", nil},
		{"replace keeps comment", "[a]\nx = 1 # why\n", []string{"a"}, "x", "2", "[a]\nx = 2 # why\n", nil},
		{"replace multi-line array", "[a]\nx = [\n  1, # one\n  2,\n]\ny = 3\n", []string{"a"}, "x", "[3]", "[a]\nx = [3]\ny = 3\n", nil},
		{"no trailing newline", "[a]\nx = 1", []string{"a"}, "y", "2", "[a]\nx = 1\ny = 2\n", nil},
		{"new table, no trailing newline", "x = 1", []string{"t"}, "y", "2", "x = 1\n\n[t]\n  y = 2\n", nil},
		{"CRLF kept", "[a]\r\nx = 1\r\n", []string{"a"}, "y", "2", "[a]\r\nx = 1\r\ny = 2\r\n", nil},
		{"dotted key replaced in place", "[p]\nc.d = true\n", []string{"p", "c"}, "d", "false", "[p]\nc.d = false\n", nil},
		{"key added to a dotted-key table as a dotted key", "[p]\nc.d = true\nx = 1\n\n[q]\n", []string{"p", "c"}, "e", "false", "[p]\nc.d = true\nx = 1\nc.e = false\n\n[q]\n", nil},
		{"sub-table of a dotted-key table as a dotted key", "[p]\n  c.r.runc.t = \"x\"\n", []string{"p", "c", "r", "kata"}, "t", `"y"`, "[p]\n  c.r.runc.t = \"x\"\n  c.r.kata.t = \"y\"\n", nil},
		{"root dotted keys", "version = 2\nplugins.x.a = 1\n\n[b]\n", []string{"plugins", "x"}, "c", "2", "version = 2\nplugins.x.a = 1\nplugins.x.c = 2\n\n[b]\n", nil},
		{"inline table refused", "[p]\nc = {d = 1}\n", []string{"p", "c"}, "e", "1", "", ErrUnsupported},
		{"array of tables refused", "[[p]]\nc = 1\n", []string{"p"}, "c", "2", "", ErrUnsupported},
		{"quoted header matched", "[plugins.'io.x']\na = 1\n", []string{"plugins", "io.x"}, "b", "2", "[plugins.'io.x']\na = 1\nb = 2\n", nil},
		{"multi-line string not a header", "[a]\ns = \"\"\"\n[b]\nx = 1\n\"\"\"\n", []string{"b"}, "x", "2", "[a]\ns = \"\"\"\n[b]\nx = 1\n\"\"\"\n\n[b]\n  x = 2\n", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse([]byte(tc.src))
			if err != nil {
				t.Fatal(err)
			}
			err = d.Set(tc.table, tc.key, tc.val)
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Set: err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Set: %v", err)
			}
			if got := string(d.Bytes()); got != tc.want {
				t.Fatalf("got:\n%q\nwant:\n%q", got, tc.want)
			}
			if _, err := Decode(d.Bytes()); err != nil {
				t.Fatalf("result does not parse: %v", err)
			}
		})
	}
}

func TestVerifyCatchesLoss(t *testing.T) {
	before := []byte("[a]\nx = 1\ny = 2\n")
	after := []byte("[a]\nx = 1\n")
	if err := Verify(before, after, nil); err == nil || !strings.Contains(err.Error(), "a.y") {
		t.Fatalf("Verify: err = %v, want loss of a.y reported", err)
	}
}

// validSamples use TOML syntax GKE or an operator may write; they also
// seed FuzzApply.
var validSamples = []string{
	"[ plugins . \"io.containerd.grpc.v1.cri\" . containerd ] # GKE\n  discard_unpacked_layers = true # why\n",
	"a . b = 1\n[plugins]\n",
	"n = [1, 2, 3,]\nm = [\n  [1, 2],\n  ['a', \"b\"], # c\n]\n",
	"i = { x = [1, 2], y = { z = 'q' } }\n",
	"h = 0xDEAD_BEEF\no = 0o755\nb = 0b11\nf = -inf\ng = nan\ne = 6.626e-34\nu = +1_000\n",
	"d1 = 1979-05-27T07:32:00-08:00\nd2 = 1979-05-27 07:32:00Z\nd3 = 1979-05-27\nd4 = 07:32:00.999\n",
	"s = \"\"\"\nline \\\n  continued \"\" quote\"\"\"\"\nl = '''it's'''''\n",
	"\"quoted key\" = 1\n'literal key' = 2\n[\"q.t\".'r s']\nk = 3\n",
	"[[plugins.list]]\nx = 1\n[[plugins.list]]\nx = 2\n",
}

// TestApplyAcceptsValidTOML: syntax GKE or an operator may use must not
// make the editor refuse.
func TestApplyAcceptsValidTOML(t *testing.T) {
	for _, src := range validSamples {
		out, err := Apply([]byte(src), kataChanges(), Render)
		if err != nil {
			t.Errorf("Apply(%q): %v", src, err)
			continue
		}
		if _, err := Decode(out); err != nil {
			t.Errorf("Apply(%q) output does not parse: %v", src, err)
		}
	}
}

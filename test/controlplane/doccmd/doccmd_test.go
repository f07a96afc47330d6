package doccmd

import (
	"reflect"
	"strings"
	"testing"
)

const guide = "# Guide\n\n" +
	"## 1. Set up\n\n" +
	"<!-- step: env -->\n" +
	"```sh\n" +
	"export A=1 B=2   # names\n" +
	"# a whole-line comment\n" +
	"\n" +
	"gcloud compute networks create n \\\n" +
	"  --mtu=8896 \\\n" +
	"  --subnet-mode=custom\n" +
	"grep -E '^X #not a comment' f # a comment\n" +
	"```\n\n" +
	"Text.\n\n" +
	"```text\nnot a command\n```\n\n" +
	"1. A list item:\n\n" +
	"   <!-- podvm-path -->\n" +
	"   ```sh\n" +
	"   make podvm\n" +
	"   cat > values.yaml <<'EOF'\n" +
	"   a: 1 # kept\n" +
	"     b: 2\n" +
	"   EOF\n" +
	"   kubectl apply -f - <<<'{\"kind\":\"X\"}'\n" +
	"   ```\n\n" +
	"<!-- can-i: install -->\n" +
	"```\n" +
	"# not a heading\n" +
	"<!-- not a marker -->\n" +
	"```\n" +
	"```yaml\n" +
	"  a: 1\n" +
	"```\n"

func TestParse(t *testing.T) {
	bs, err := Parse(strings.NewReader(guide))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) != 5 {
		t.Fatalf("%d blocks, want 5: %+v", len(bs), bs)
	}
	want0 := Block{Marker: "step: env", Heading: "1. Set up", Lang: "sh", Line: 6, Text: "export A=1 B=2   # names\n" +
		"# a whole-line comment\n" +
		"\n" +
		"gcloud compute networks create n \\\n" +
		"  --mtu=8896 \\\n" +
		"  --subnet-mode=custom\n" +
		"grep -E '^X #not a comment' f # a comment\n", Commands: []Command{
		{Text: "export A=1 B=2", Line: 7},
		{Text: "gcloud compute networks create n --mtu=8896 --subnet-mode=custom", Line: 10},
		{Text: "grep -E '^X #not a comment' f", Line: 13},
	}}
	if !reflect.DeepEqual(bs[0], want0) {
		t.Errorf("block 0\n got %+v\nwant %+v", bs[0], want0)
	}
	// A block of another language is text: no commands.
	if want := (Block{Heading: "1. Set up", Lang: "text", Line: 18, Text: "not a command\n"}); !reflect.DeepEqual(bs[1], want) {
		t.Errorf("block 1\n got %+v\nwant %+v", bs[1], want)
	}
	want1 := Block{Marker: "podvm-path", Heading: "1. Set up", Lang: "sh", Line: 25, Text: "make podvm\n" +
		"cat > values.yaml <<'EOF'\n" +
		"a: 1 # kept\n" +
		"  b: 2\n" +
		"EOF\n" +
		"kubectl apply -f - <<<'{\"kind\":\"X\"}'\n", Commands: []Command{
		{Text: "make podvm", Line: 26},
		{Text: "cat > values.yaml", Here: "EOF", Body: "a: 1 # kept\n  b: 2\n", Line: 27},
		{Text: `kubectl apply -f - <<<'{"kind":"X"}'`, Line: 31},
	}}
	if !reflect.DeepEqual(bs[2], want1) {
		t.Errorf("block 2\n got %+v\nwant %+v", bs[2], want1)
	}
	// A bare fence is a block too, found by its marker; what looks like a
	// heading or a marker inside it is its text, not the guide's.
	b, ok := ByMarker(bs, "can-i: install")
	if want := (Block{Marker: "can-i: install", Heading: "1. Set up", Line: 35, Text: "# not a heading\n<!-- not a marker -->\n"}); !ok || !reflect.DeepEqual(b, want) {
		t.Errorf("ByMarker: %v\n got %+v\nwant %+v", ok, b, want)
	}
	if want := (Block{Heading: "1. Set up", Lang: "yaml", Line: 39, Text: "  a: 1\n"}); !reflect.DeepEqual(bs[4], want) {
		t.Errorf("block 4\n got %+v\nwant %+v", bs[4], want)
	}
	if _, ok := ByMarker(bs, "can-i: helm"); ok {
		t.Error("ByMarker found an unmarked block")
	}
	names, cmds := Marked(bs, "step")
	if !reflect.DeepEqual(names, []string{"env"}) || len(cmds["env"]) != 3 {
		t.Errorf("Marked: %v %v", names, cmds)
	}
	if n := len(Commands(bs)); n != 6 {
		t.Errorf("Commands: %d", n)
	}
}

// What no shell would run is refused, with the line.
func TestParseRefuses(t *testing.T) {
	for name, doc := range map[string]string{
		"unclosed":       "```sh\nls\n",
		"continuation":   "```sh\nls \\\n```\n",
		"heredoc":        "```sh\ncat <<EOF\nx\n```\n",
		"heredoc at end": "```sh\ncat <<EOF\nx\n",
		"unclosed text":  "```text\nx\n",
	} {
		if _, err := Parse(strings.NewReader(doc)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestFields(t *testing.T) {
	vars := map[string]string{"PROJECT": "p", "HOME": "/home/u", "EMPTY": "", "SP": "a b"}
	lookup := func(k string) (string, bool) { v, ok := vars[k]; return v, ok }
	for in, want := range map[string][]string{
		`gcloud projects create "$PROJECT" --x=$PROJECT-podvm`: {"gcloud", "projects", "create", "p", "--x=p-podvm"},
		`export UPLOAD=gs://$PROJECT-podvm`:                    {"export", "UPLOAD=gs://p-podvm"},
		`kubectl create secret --from-literal=token="$SP"`:     {"kubectl", "create", "secret", "--from-literal=token=a b"},
		`echo '$PROJECT' "${PROJECT}" \$ a\ b ~/x ~ a~ "~/y"`:  {"echo", "$PROJECT", "p", "$", "a b", "/home/u/x", "/home/u", "a~", "~/y"},
		`grep -E '^CAA-GCP-T4-(GPU|SLOTS) ' "$EMPTY" x`:        {"grep", "-E", "^CAA-GCP-T4-(GPU|SLOTS) ", "", "x"},
		`a "b"c'd'e`: {"a", "bcde"},
		`cost $ 5`:   {"cost", "$", "5"},
	} {
		got, err := Fields(in, lookup)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("Fields(%s) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, in := range []string{
		`a && b`, `a | b`, `a; b`, `a > f`, `a &`, `HEAD=$(kubectl get pods)`, "a `b`", `echo "$(x)"`,
		`echo $UNSET`, `echo "${UNSET}"`, `echo 'open`, `echo ${A:-x}`,
	} {
		if got, err := Fields(in, lookup); err == nil {
			t.Errorf("Fields(%s) = %q, want an error", in, got)
		}
	}
}

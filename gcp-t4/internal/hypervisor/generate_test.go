package hypervisor

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"
)

// protocVersionLine differs between Debian releases' protoc builds without
// changing the code, so it is left out of the comparison.
var protocVersionLine = regexp.MustCompile(`(?m)^// \tprotoc +v.*\n`)

func TestGeneratedCodeIsCurrent(t *testing.T) {
	out := t.TempDir()
	cmd := exec.Command("./generate.sh", out)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("generate.sh: %v\n%s", err, stderr.String())
	}
	for _, name := range []string{"hypervisor.pb.go", "hypervisor_ttrpc.pb.go"} {
		committed, err := os.ReadFile(name)
		if err != nil {
			t.Fatalf("reading committed %s: %v", name, err)
		}
		fresh, err := os.ReadFile(out + "/" + name)
		if err != nil {
			t.Fatalf("generate.sh did not write %s: %v", name, err)
		}
		committed = protocVersionLine.ReplaceAll(committed, nil)
		fresh = protocVersionLine.ReplaceAll(fresh, nil)
		if !bytes.Equal(committed, fresh) {
			t.Errorf("%s is stale: hypervisor.proto or a generator version changed; run `go generate ./gcp-t4/internal/hypervisor` and commit the result\n%s", name, firstDiff(committed, fresh))
		}
	}
}

// firstDiff shows the first differing line, enough to see what moved.
func firstDiff(a, b []byte) string {
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < len(al) || i < len(bl); i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d:\n  committed: %s\n  generated: %s", i+1, x, y)
		}
	}
	return ""
}

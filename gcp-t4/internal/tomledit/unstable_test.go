package tomledit

import (
	"testing"

	"github.com/pelletier/go-toml/v2/unstable"
)

// TestUnstableParserLacksTheRangesWeEdit is why scan.go is ours and not
// go-toml's unstable parser (see the package comment). Set replaces a
// value in place and inserts after a table's header or last key, so it
// needs where a value and a statement start and end. The unstable parser
// gives ranges for keys, strings, scalars and a whole top-level
// key-value, but none for an array, one byte for an inline table and
// none for a table header; comments only on request, and blank lines and
// indentation not at all. Those spans would still have to be found by
// scanning the bytes ourselves. Should go-toml start reporting them, this
// test fails: reconsider the replacement then.
func TestUnstableParserLacksTheRangesWeEdit(t *testing.T) {
	src := []byte("[t]\na = [1, 2] # c\nb = {x = 1}\n")
	var p unstable.Parser
	p.Reset(src)
	spans := map[unstable.Kind]string{}
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			spans[unstable.Table] = string(p.Raw(e.Raw))
		case unstable.KeyValue:
			v := e.Value()
			spans[v.Kind] = string(p.Raw(v.Raw))
		}
	}
	if err := p.Error(); err != nil {
		t.Fatal(err)
	}
	for kind, want := range map[unstable.Kind]string{
		unstable.Table:       "",  // whole line "[t]" needed
		unstable.Array:       "",  // "[1, 2]" needed
		unstable.InlineTable: "{", // "{x = 1}" needed
	} {
		if got, ok := spans[kind]; !ok || got != want {
			t.Errorf("go-toml's unstable parser now gives a %s the range %q (was %q): it may now say where what tomledit edits starts and ends; reconsider replacing scan.go with it", kind, got, want)
		}
	}
}

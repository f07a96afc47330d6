package initdata

import (
	"encoding/base64"
	"strings"
	"testing"
)

// A value round-trips, is the same for the same TOML, and anything that is
// not base64 of gzip is refused with a reason.
func TestEncodeDecode(t *testing.T) {
	const text = "algorithm = \"sha256\"\nversion = \"0.1.0\"\n"
	a, err := Encode(text)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Encode(text)
	if a != b {
		t.Errorf("two encodings of one TOML differ: %s, %s", a, b)
	}
	if got, err := Decode(" " + a + "\n"); err != nil || got != text {
		t.Errorf("Decode(Encode(x)) = %q, %v", got, err)
	}
	for _, bad := range []string{"%%%", base64.StdEncoding.EncodeToString([]byte("plain text"))} {
		if _, err := Decode(bad); err == nil || !strings.Contains(err.Error(), "not base64 of gzip") {
			t.Errorf("Decode(%q): %v, want a refusal", bad, err)
		}
	}
}

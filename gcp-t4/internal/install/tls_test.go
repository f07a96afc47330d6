package install

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// --tls-ca/--tls-cert/--tls-key are refused with the reason, whatever
// else is given; TLS_SKIP_VERIFY=true is refused, false accepted.
func TestCustomTLSAndSkipVerifyRefused(t *testing.T) {
	pem := filepath.Join(t.TempDir(), "x.pem")
	if err := os.WriteFile(pem, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--tls-ca=" + pem, "--tls-cert=" + pem, "--tls-key=" + pem}, {"--tls-cert=" + pem}} {
		_, err := parseInstall(args, io.Discard)
		if !errors.Is(err, errCustomTLS) || !strings.Contains(err.Error(), "baked into the podVM image") {
			t.Errorf("%v: %v", args, err)
		}
	}
	if err := ValidateConfig(map[string]string{"TLS_SKIP_VERIFY": "true"}, false); err == nil || !strings.Contains(err.Error(), "TLS_SKIP_VERIFY") || !strings.Contains(err.Error(), "impersonate") {
		t.Errorf("TLS_SKIP_VERIFY=true: %v", err)
	}
	if err := ValidateConfig(map[string]string{"TLS_SKIP_VERIFY": "false"}, false); err != nil && strings.Contains(err.Error(), "TLS_SKIP_VERIFY") {
		t.Errorf("TLS_SKIP_VERIFY=false: %v", err)
	}
}

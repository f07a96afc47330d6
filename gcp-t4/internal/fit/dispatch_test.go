package fit_test

import (
	"bytes"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/plan"
)

// `gcp-t4 plan serve` reaches this package with the words after "serve",
// and its exit status comes back.
func TestPlanServeDispatch(t *testing.T) {
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct {
		args []string
		rc   int
		want string
	}{
		{[]string{"serve", "--model-size", "20GB", "--gpu", "t4", "--tp", "2"}, 0, "verdict                  FITS"},
		{[]string{"serve", "--model", "mistralai/Mistral-Small-24B-Instruct-2501", "--tp", "2"}, 1, "DOES NOT FIT"},
		{[]string{"serve", "--tp", "2"}, 2, "gcp-t4 plan serve: give exactly one of"},
	} {
		var out, errb bytes.Buffer
		rc := plan.Main(t.Context(), tc.args, &out, &errb, logger)
		if rc != tc.rc || !strings.Contains(out.String()+errb.String(), tc.want) {
			t.Errorf("plan %v: exit %d, output %q %q; want %d and %q", tc.args, rc, out.String(), errb.String(), tc.rc, tc.want)
		}
	}
}

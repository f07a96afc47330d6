package gc

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"regexp"
	"strings"
	"testing"
)

// listedFlag is one flag line of a usage: "  -name type" (two spaces, as
// flag.PrintDefaults writes it; a bool has no type, a one-letter flag's
// usage follows a tab).
var listedFlag = regexp.MustCompile(`^  -([a-z0-9-]+)(?: ([a-z0-9]+))?(?:\t.*)?$`)

// TestHelpListsOnlyWhatItUses: gc -h and reaper -h list their own flags
// and the provider settings they read, not the ~35 CAA takes (they once
// listed -use-public-ip, "Refused: …"); every flag listed is accepted; and
// the help never prints the key GCP_CREDENTIALS holds as a default.
func TestHelpListsOnlyWhatItUses(t *testing.T) {
	const key = `{"type":"service_account","private_key":"SENTINEL-KEY"}`
	t.Setenv("GCP_CREDENTIALS", key)
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for name, main := range map[string]func(context.Context, []string, io.Writer, io.Writer, *slog.Logger) int{"gc": Main, "reaper": MainReaper} {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			if code := main(t.Context(), []string{"-h"}, &out, &errb, logger); code != 0 {
				t.Fatalf("%s -h: exit %d\n%s", name, code, errb.String())
			}
			help := out.String() + errb.String()
			for _, absent := range []string{"-use-public-ip", "Refused", "-zone", "-image-name", "-profiles", "-max-gpus-per-pod", "SENTINEL-KEY"} {
				if strings.Contains(help, absent) {
					t.Errorf("%s -h shows %q:\n%s", name, absent, help)
				}
			}
			want := []string{"-kubeconfig", "-grace", "-interval", "-delete", "-gcp-project-id", "-cluster-id", "GCP_CLUSTER_ID", "-gcp-endpoint", "-mutations-per-second"}
			if name == "reaper" {
				want = append(want, "-credentials-file")
			} else {
				want = append(want, "-caa-namespace", "-o")
			}
			for _, w := range want {
				if !strings.Contains(help, w) {
					t.Errorf("%s -h lacks %q:\n%s", name, w, help)
				}
			}
			if n := strings.Count(help, "\n"); n > 50 {
				t.Errorf("%s -h is %d lines; want it short:\n%s", name, n, help)
			}
			listed := 0
			for _, line := range strings.Split(help, "\n") {
				m := listedFlag.FindStringSubmatch(line)
				if m == nil {
					continue
				}
				listed++
				arg := "-" + m[1] + "=" + map[string]string{"": "true", "string": "x", "duration": "1m", "float": "1", "int": "1"}[m[2]]
				var o, e bytes.Buffer
				if code := main(t.Context(), []string{arg, "-h"}, &o, &e, logger); code != 0 {
					t.Errorf("%s %s -h: exit %d, so the listed flag is not accepted:\n%s", name, arg, code, e.String())
				}
			}
			if listed < 10 {
				t.Errorf("%s -h: read only %d flags:\n%s", name, listed, help)
			}
		})
	}
}

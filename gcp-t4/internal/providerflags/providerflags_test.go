package providerflags

import (
	"flag"
	"io"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// Two commands' configurations are independent of each other and of the
// Manager in the provider table.
func TestEachFlagsHasItsOwnConfig(t *testing.T) {
	t.Setenv("GCP_PROJECT_ID", "env-project")
	parse := func(args ...string) *Flags {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := Register(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return f
	}
	a := parse("-gcp-project-id", "a", "-labels", "team=a")
	b := parse("-zone", "us-central1-b")
	if a.Config().ProjectID != "a" || a.Config().Labels["team"] != "a" {
		t.Fatalf("a = %+v", a.Config())
	}
	if b.Config().ProjectID != "env-project" || len(b.Config().Labels) != 0 || b.Config().Zone != "us-central1-b" {
		t.Fatalf("b kept a's flags or lost the env default: %+v", b.Config())
	}
	table, ok := provider.Get(gcpt4.ProviderName).(*gcpt4.Manager)
	if !ok {
		t.Fatalf("provider table has no gcpt4 Manager")
	}
	if table.GetConfig().ProjectID != "" || &a.m == table {
		t.Fatal("Flags shares the provider table's Manager")
	}
}

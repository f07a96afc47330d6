// Package providerflags gives each gcp-t4 command a gcpt4.Manager of its
// own: the provider's flags and env parsed exactly as CAA parses them
// (Manager.ParseCmd), without the provider table upstream's
// cloud-api-adaptor reads. That table holds one Manager per process, so
// commands and tests that reset its configuration and type-assert what it
// builds would share, and race on, one Config.
//
// It lives here, not in gcpt4: the drop-in provider package may only use
// upstream's package paths and API, which have no such constructor.
package providerflags

import (
	"context"
	"flag"
	"log"
	"log/slog"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
)

// Flags is one command's provider configuration.
type Flags struct {
	m gcpt4.Manager
}

// Register adds the provider's flags to fs, each defaulting to its env
// var, and makes fs's -h list the command's own flags in full and the
// provider's by name (Help); a command that reads only some of them sets
// its own Help afterwards.
func Register(fs *flag.FlagSet) *Flags {
	f := &Flags{}
	f.m.ParseCmd(fs)
	fs.Usage = Help{}.Usage(fs)
	return f
}

// CheckEnv checks the provider's environment variables as strictly as the
// provider does at start, so a value CAA's registrar would quietly replace
// by its default is an error in the command too.
func (f *Flags) CheckEnv(lookup func(string) (string, bool)) error { return f.m.CheckEnv(lookup) }

// Config is the parsed configuration; read it after fs.Parse.
func (f *Flags) Config() gcpt4.Config { return *f.m.GetConfig() }

// Provider builds the provider, logging to logger; the caller tears it
// down.
func (f *Flags) Provider(ctx context.Context, logger *slog.Logger) (*gcpt4.Provider, error) {
	return gcpt4.NewProvider(ctx, f.Config(), ProviderLogger(logger))
}

// Lister builds the provider for a command that only lists and deletes
// podVMs (gc, the reaper, status): it leaves out GCP_PROFILES_FILE, a
// path inside CAA's pod that such a command, reading CAA's peer-pods-cm
// from elsewhere, cannot open and does not need.
func (f *Flags) Lister(ctx context.Context, logger *slog.Logger) (*gcpt4.Provider, error) {
	return gcpt4.NewProvider(ctx, ForListing(f.Config()), ProviderLogger(logger))
}

// ForListing is cfg without what only creates need and only CAA's pod
// can read (GCP_PROFILES_FILE).
func ForListing(cfg gcpt4.Config) gcpt4.Config {
	cfg.ProfilesFile = ""
	return cfg
}

// ProviderLogger is the *log.Logger gcpt4 takes (it logs with Printf, as
// upstream's providers do), writing into logger at level Info with
// provider=gcp-t4, so our commands keep one structured log.
func ProviderLogger(logger *slog.Logger) *log.Logger {
	return slog.NewLogLogger(logger.With("provider", "gcp-t4").Handler(), slog.LevelInfo)
}

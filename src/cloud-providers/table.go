package provider

import (
	"flag"
	"sort"
)

// CloudProvider is what a provider package registers from its init.
type CloudProvider interface {
	ParseCmd(flags *flag.FlagSet)
	LoadEnv()
	NewProvider() (Provider, error)
}

// providerTable is upstream's registry; providers add themselves from init,
// before main runs, so it needs no lock.
var providerTable = map[string]CloudProvider{}

// AddCloudProvider registers a provider under the name the CLI selects it by.
func AddCloudProvider(name string, cloud CloudProvider) {
	providerTable[name] = cloud
}

// Get returns the registered provider, or nil. Upstream can also load an
// external plugin here; the fork links its providers statically.
func Get(name string) CloudProvider {
	return providerTable[name]
}

// List returns the registered provider names, sorted.
func List() []string {
	names := make([]string, 0, len(providerTable))
	for name := range providerTable {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

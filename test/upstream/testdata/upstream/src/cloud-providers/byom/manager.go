// Package byom is a stand-in provider that only registers itself.
package byom

import (
	"errors"
	"flag"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
)

func init() { provider.AddCloudProvider("byom", manager{}) }

type manager struct{}

func (manager) ParseCmd(*flag.FlagSet) {}
func (manager) LoadEnv()               {}
func (manager) NewProvider() (provider.Provider, error) {
	return nil, errors.New("byom: stand-in provider")
}

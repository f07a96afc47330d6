// Package prices is the dated, cited price table `gcp-t4 plan` estimates
// hourly costs from. The table itself is the provider's (gcpt4/catalog's embedded
// prices.json), the one it ranks shapes by, so an estimate and the shape
// the provider picks never disagree; this package adds the currency and
// date an estimate is shown with.
package prices

import (
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// Source is where prices come from, and when they were read.
type Source = catalog.PriceSource

// Table is the price table.
type Table struct {
	*catalog.PriceTable
}

// Load parses the provider's embedded table.
func Load() (*Table, error) {
	t, err := catalog.LoadPrices()
	if err != nil {
		return nil, err
	}
	return &Table{t}, nil
}

// Parse reads a table strictly and checks that every price cites a listed
// source, so an uncited number cannot slip in.
func Parse(data []byte) (*Table, error) {
	t, err := catalog.ParsePrices(data)
	if err != nil {
		return nil, err
	}
	return &Table{t}, nil
}

// Estimate is an hourly cost. Known is false when a part has no price (or
// no Spot price); Total then covers only the known parts.
type Estimate struct {
	Host     float64  `json:"hostPerHour"`
	GPU      float64  `json:"gpuPerHour"`
	Total    float64  `json:"totalPerHour"`
	Currency string   `json:"currency"`
	Region   string   `json:"priceRegion"`
	AsOf     string   `json:"asOf"`
	Known    bool     `json:"known"`
	Missing  []string `json:"missing,omitempty"`
	Sources  []string `json:"sources"`
}

// Hourly estimates a VM: machine type (N1 custom types from the per-vCPU
// and per-GiB rates) plus count attached accelerators, under a
// provisioning model (spot or not).
func (t *Table) Hourly(machineType, accelerator string, count int64, spot bool) Estimate {
	model := setting.ProvisioningStandard
	if spot {
		model = setting.ProvisioningSpot
	}
	h := t.PriceTable.Hourly(machineType, accelerator, count, model)
	return Estimate{Host: h.Host, GPU: h.GPU, Total: h.Total, Currency: t.Currency, Region: t.Region, AsOf: t.AsOf,
		Known: h.Known, Missing: h.Missing, Sources: h.Sources}
}

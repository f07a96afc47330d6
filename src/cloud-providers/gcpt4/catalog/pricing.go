// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package catalog

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// pricesJSON is the dated, cited price table shapes are ranked by (and
// `gcp-t4 plan` estimates from). It is data, embedded, so ranking needs no
// cloud account and no Billing API call per create.
//
//go:embed prices.json
var pricesJSON []byte

// PriceSource is where prices come from, and when they were read.
type PriceSource struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Ref   string `json:"ref"`
	Date  string `json:"date"`
}

// Price is the hourly price of one item; Spot is 0 when unknown.
type Price struct {
	OnDemand float64 `json:"onDemand"`
	Spot     float64 `json:"spot,omitempty"`
	Source   string  `json:"source"`
	// Derived says how a price not read directly from its source was
	// obtained from it.
	Derived string `json:"derived,omitempty"`
	// IncludesGPU marks machine types whose GPU is bundled and priced in.
	IncludesGPU bool `json:"includesGPU,omitempty"`
}

// CustomRates price N1 custom machine types per vCPU and per GiB.
type CustomRates struct {
	VCPU      Price `json:"vcpu"`
	MemoryGiB Price `json:"memoryGiB"`
}

// PriceTable is the price table.
type PriceTable struct {
	Region       string           `json:"region"`
	Currency     string           `json:"currency"`
	Unit         string           `json:"unit"`
	AsOf         string           `json:"asOf"`
	Note         string           `json:"note"`
	Sources      []PriceSource    `json:"sources"`
	MachineTypes map[string]Price `json:"machineTypes"`
	CustomN1     CustomRates      `json:"customN1"`
	Accelerators map[string]Price `json:"accelerators"`
}

// LoadPrices parses the embedded table.
func LoadPrices() (*PriceTable, error) { return ParsePrices(pricesJSON) }

// ParsePrices reads a table strictly and checks that every price cites a
// listed source, so an uncited number cannot slip in.
func ParsePrices(data []byte) (*PriceTable, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t PriceTable
	if err := dec.Decode(&t); err != nil {
		return nil, fmt.Errorf("price table: %w", err)
	}
	if t.AsOf == "" || t.Region == "" || t.Currency == "" {
		return nil, fmt.Errorf("price table: asOf, region and currency are required")
	}
	ids := map[string]bool{}
	for i, s := range t.Sources {
		if s.ID == "" || s.Ref == "" || s.Date == "" {
			return nil, fmt.Errorf("price table: sources[%d]: id, ref and date are required", i)
		}
		ids[s.ID] = true
	}
	check := func(what string, p Price) error {
		if !ids[p.Source] {
			return fmt.Errorf("price table: %s: source %q is not in sources", what, p.Source)
		}
		if p.OnDemand <= 0 || p.Spot < 0 {
			return fmt.Errorf("price table: %s: onDemand must be positive and spot not negative", what)
		}
		return nil
	}
	for kind, m := range map[string]map[string]Price{"machineTypes": t.MachineTypes, "accelerators": t.Accelerators} {
		for name, p := range m {
			if err := check(kind+"."+name, p); err != nil {
				return nil, err
			}
		}
	}
	if t.CustomN1 != (CustomRates{}) {
		if err := check("customN1.vcpu", t.CustomN1.VCPU); err != nil {
			return nil, err
		}
		if err := check("customN1.memoryGiB", t.CustomN1.MemoryGiB); err != nil {
			return nil, err
		}
	}
	return &t, nil
}

// HourlyPrice is an hourly cost. Known is false when a part has no price
// (or no Spot price); Total then covers only the known parts.
type HourlyPrice struct {
	Host    float64  `json:"hostPerHour"`
	GPU     float64  `json:"gpuPerHour"`
	Total   float64  `json:"totalPerHour"`
	Known   bool     `json:"known"`
	Missing []string `json:"missing,omitempty"`
	Sources []string `json:"sources"`
}

// Hourly prices a VM: machine type plus count attached accelerators, under
// a provisioning model. N1 custom types are priced from the per-vCPU and
// per-GiB rates; bundled GPUs are in the machine type's price.
func (t *PriceTable) Hourly(machineType, accelerator string, count int64, model string) HourlyPrice {
	spot := model == setting.ProvisioningSpot
	e := HourlyPrice{Known: true}
	srcs := map[string]bool{}
	pick := func(what string, p Price, ok bool) float64 {
		if spot {
			what += " (Spot)"
		}
		if !ok || (spot && p.Spot == 0) {
			e.Known = false
			e.Missing = append(e.Missing, what)
			return 0
		}
		srcs[p.Source] = true
		if spot {
			return p.Spot
		}
		return p.OnDemand
	}
	if s, ok := LookupShape(machineType); ok && s.Custom {
		rates := t.CustomN1
		known := rates != (CustomRates{})
		e.Host = pick("custom N1 vCPU", rates.VCPU, known)*float64(s.VCPUs) +
			pick("custom N1 memory", rates.MemoryGiB, known)*float64(s.MemoryMiB)/1024
	} else {
		mp, ok := t.MachineTypes[machineType]
		e.Host = pick("machine type "+machineType, mp, ok)
	}
	if accelerator != "" && count > 0 {
		ap, ok := t.Accelerators[accelerator]
		e.GPU = pick("accelerator "+accelerator, ap, ok) * float64(count)
	}
	e.Total = e.Host + e.GPU
	for s := range srcs {
		e.Sources = append(e.Sources, s)
	}
	sort.Strings(e.Sources)
	return e
}

// Source returns the source of that id.
func (t *PriceTable) Source(id string) (PriceSource, bool) {
	for _, s := range t.Sources {
		if s.ID == id {
			return s, true
		}
	}
	return PriceSource{}, false
}

// Package prices holds the dated, cited price table `gcp-t4 plan` estimates
// hourly costs from. The table is one data file (prices.json), embedded,
// so an estimate never needs a cloud account; every entry names its source.
package prices

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"fmt"
	"sort"
)

//go:embed prices.json
var tableJSON []byte

// Source is where prices come from, and when they were read.
type Source struct {
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

// Table is the price table.
type Table struct {
	Region       string           `json:"region"`
	Currency     string           `json:"currency"`
	Unit         string           `json:"unit"`
	AsOf         string           `json:"asOf"`
	Note         string           `json:"note"`
	Sources      []Source         `json:"sources"`
	MachineTypes map[string]Price `json:"machineTypes"`
	Accelerators map[string]Price `json:"accelerators"`
}

// Load parses the embedded table.
func Load() (*Table, error) { return Parse(tableJSON) }

// Parse reads a table strictly and checks that every price cites a listed
// source, so an uncited number cannot slip in.
func Parse(data []byte) (*Table, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var t Table
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
	for kind, m := range map[string]map[string]Price{"machineTypes": t.MachineTypes, "accelerators": t.Accelerators} {
		for name, p := range m {
			if !ids[p.Source] {
				return nil, fmt.Errorf("price table: %s.%s: source %q is not in sources", kind, name, p.Source)
			}
			if p.OnDemand <= 0 || p.Spot < 0 {
				return nil, fmt.Errorf("price table: %s.%s: onDemand must be positive and spot not negative", kind, name)
			}
		}
	}
	return &t, nil
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

// Hourly estimates a VM: machine type plus count attached accelerators,
// under a provisioning model (STANDARD or SPOT).
func (t *Table) Hourly(machineType, accelerator string, count int64, spot bool) Estimate {
	e := Estimate{Currency: t.Currency, Region: t.Region, AsOf: t.AsOf, Known: true}
	srcs := map[string]bool{}
	pick := func(kind, name string, p Price, ok bool) float64 {
		what := kind + " " + name
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
	mp, ok := t.MachineTypes[machineType]
	e.Host = pick("machine type", machineType, mp, ok)
	if accelerator != "" && count > 0 {
		ap, ok := t.Accelerators[accelerator]
		e.GPU = pick("accelerator", accelerator, ap, ok) * float64(count)
	}
	e.Total = e.Host + e.GPU
	for s := range srcs {
		e.Sources = append(e.Sources, s)
	}
	sort.Strings(e.Sources)
	return e
}

// Source returns the source of that id.
func (t *Table) Source(id string) (Source, bool) {
	for _, s := range t.Sources {
		if s.ID == id {
			return s, true
		}
	}
	return Source{}, false
}

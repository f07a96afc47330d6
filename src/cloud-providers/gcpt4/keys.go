// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
)

// key is one recorded setting: its description, and the parser that sets
// the configuration field from a raw value, refusing what the kind cannot
// hold.
type key struct {
	setting.Key
	parse func(string) error
}

// keyRegistrar has upstream FlagRegistrar's method set (so ParseCmd reads
// as upstream's config-extractor expects: reg.XxxWithEnv calls) and records
// every key. Upstream's registrar falls back to the default, silently, on a
// value it cannot parse (GCP_SPOT_FALLBACK=ture is false, ROOT_VOLUME_SIZE=abc
// is 50, a bad GCP_LABELS pair is dropped: src/cloud-providers/util.go at
// v0.22.0); the recorded parsers let the provider refuse such values at
// start instead.
type keyRegistrar struct {
	// up registers through upstream's registrar (env-derived defaults, as
	// inside CAA); nil registers the hard-coded defaults only, for
	// ConfigFromEnv, which must not see the process environment.
	up    *provider.FlagRegistrar
	flags *flag.FlagSet
	keys  []key
}

func (r *keyRegistrar) add(k key) { r.keys = append(r.keys, k) }

// register records k with conv as its parser into field, then registers
// the flag: through upstream's registrar (up) inside CAA, else on the
// flag set alone (local). Each XxxWithEnv is this with its kind's parser.
func register[T any](r *keyRegistrar, field *T, k setting.Key, conv func(string) (T, error), up, local func()) {
	r.add(key{Key: k, parse: func(v string) error {
		x, err := conv(v)
		if err != nil {
			return err
		}
		*field = x
		return nil
	}})
	if r.up != nil {
		up()
		return
	}
	local()
}

func (r *keyRegistrar) StringWithEnv(field *string, flagName, hardcodedDefault, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindString, Default: hardcodedDefault, Usage: usage},
		func(v string) (string, error) { return v, nil },
		func() { r.up.StringWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.StringVar(field, flagName, hardcodedDefault, usage) })
}

func (r *keyRegistrar) IntWithEnv(field *int, flagName string, hardcodedDefault int, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindInt, Default: strconv.Itoa(hardcodedDefault), Usage: usage},
		func(v string) (int, error) {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("%q is not a whole number", v)
			}
			return n, nil
		},
		func() { r.up.IntWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.IntVar(field, flagName, hardcodedDefault, usage) })
}

func (r *keyRegistrar) UintWithEnv(field *uint, flagName string, hardcodedDefault uint, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindUint, Default: strconv.FormatUint(uint64(hardcodedDefault), 10), Usage: usage},
		func(v string) (uint, error) {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			if err != nil {
				return 0, fmt.Errorf("%q is not a whole number of 0 or more", v)
			}
			return uint(n), nil
		},
		func() { r.up.UintWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.UintVar(field, flagName, hardcodedDefault, usage) })
}

func (r *keyRegistrar) Float64WithEnv(field *float64, flagName string, hardcodedDefault float64, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindFloat64, Default: strconv.FormatFloat(hardcodedDefault, 'g', -1, 64), Usage: usage},
		func(v string) (float64, error) {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
				return 0, fmt.Errorf("%q is not a number", v)
			}
			return f, nil
		},
		func() { r.up.Float64WithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.Float64Var(field, flagName, hardcodedDefault, usage) })
}

// BoolWithEnv accepts what upstream reads as true ("1", "true", any case)
// and their opposites; anything else is an error rather than false.
func (r *keyRegistrar) BoolWithEnv(field *bool, flagName string, hardcodedDefault bool, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindBool, Default: strconv.FormatBool(hardcodedDefault), Usage: usage},
		setting.ParseBool,
		func() { r.up.BoolWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.BoolVar(field, flagName, hardcodedDefault, usage) })
}

func (r *keyRegistrar) DurationWithEnv(field *time.Duration, flagName string, hardcodedDefault time.Duration, envVarName, usage string, opts ...provider.FlagOption) {
	register(r, field, setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindDuration, Default: hardcodedDefault.String(), Usage: usage},
		func(v string) (time.Duration, error) {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil {
				return 0, fmt.Errorf("%q is not a duration such as 90s, 3m or 1h", v)
			}
			return d, nil
		},
		func() { r.up.DurationWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...) },
		func() { r.flags.DurationVar(field, flagName, hardcodedDefault, usage) })
}

func (r *keyRegistrar) CustomTypeWithEnv(field flag.Value, flagName, hardcodedDefault, envVarName, usage string, opts ...provider.FlagOption) {
	r.add(key{Key: setting.Key{Env: envVarName, Flag: flagName, Kind: setting.KindCustom, Default: hardcodedDefault, Usage: usage}, parse: field.Set})
	if r.up != nil {
		r.up.CustomTypeWithEnv(field, flagName, hardcodedDefault, envVarName, usage, opts...)
		return
	}
	if hardcodedDefault != "" {
		_ = field.Set(hardcodedDefault)
	}
	r.flags.Var(field, flagName, usage)
}

// applyEnv parses every recorded key whose variable lookup finds, strictly,
// into the configuration; keys in skip (flags given on the command line,
// which win over env) are left alone. Each error names the variable, the
// flag and the fix; all bad keys are reported at once.
func applyEnv(keys []key, lookup func(string) (string, bool), skip map[string]bool) error {
	var errs []error
	for _, k := range keys {
		v, ok := lookup(k.Env)
		if !ok || v == "" || skip[k.Flag] {
			continue
		}
		if err := k.parse(v); err != nil {
			errs = append(errs, fmt.Errorf("%s (flag -%s): %w%s", k.Env, k.Flag, err, kindHint(k)))
		}
	}
	return errors.Join(errs...)
}

func kindHint(k key) string {
	ex := k.Default
	switch k.Kind {
	case setting.KindBool:
		return "" // setting.ParseBool says what to use
	case setting.KindInt, setting.KindUint, setting.KindUint64:
		return fmt.Sprintf("; give a whole number, e.g. %s=%s", k.Env, ex)
	case setting.KindFloat64:
		return fmt.Sprintf("; give a number, e.g. %s=%s", k.Env, ex)
	case setting.KindDuration:
		return fmt.Sprintf("; e.g. %s=%s", k.Env, ex)
	}
	return ""
}

// Keys lists every setting the provider reads, in registration order.
func Keys() []setting.Key {
	var m Manager
	reg := &keyRegistrar{flags: flag.NewFlagSet("keys", flag.ContinueOnError)}
	m.register(reg)
	out := make([]setting.Key, len(reg.keys))
	for i, k := range reg.keys {
		out[i] = k.Key
	}
	return out
}

// KeyNames lists the provider's environment variables, sorted.
func KeyNames() []string {
	var names []string
	for _, k := range Keys() {
		names = append(names, k.Env)
	}
	sort.Strings(names)
	return names
}

// ConfigFromEnv builds the configuration CAA would build from these
// variables, parsing each strictly (the error names the key and the fix)
// and ignoring the process environment; it does not Validate. Install
// calls it to check peer-pods-cm before applying it.
func ConfigFromEnv(lookup func(string) (string, bool)) (Config, error) {
	var m Manager
	reg := &keyRegistrar{flags: flag.NewFlagSet("config", flag.ContinueOnError)}
	m.register(reg)
	if err := applyEnv(reg.keys, lookup, nil); err != nil {
		return Config{}, err
	}
	return m.cfg, nil
}

// CheckEnv parses the provider's variables from lookup as CAA would, but
// strictly, into the configuration ParseCmd registered; flags given on the
// command line are kept. NewProvider calls it with the process
// environment, so a value upstream would quietly replace by its default
// stops the adaptor at start with the key named.
func (m *Manager) CheckEnv(lookup func(string) (string, bool)) error {
	if m.flags == nil {
		return nil
	}
	given := map[string]bool{}
	m.flags.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return applyEnv(m.keys, lookup, given)
}

// osLookup is the process environment, as CAA's registrar reads it.
func osLookup(name string) (string, bool) { return os.LookupEnv(name) }

package provider

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// FlagOption marks a flag for upstream's config-extractor; it changes no
// parsing behaviour.
type FlagOption func(*flagOptions)

type flagOptions struct {
	required bool
	secret   bool
}

// Required marks a flag the deployment must set.
func Required() FlagOption { return func(o *flagOptions) { o.required = true } }

// Secret marks a flag whose value must not be logged or put in a ConfigMap.
func Secret() FlagOption { return func(o *flagOptions) { o.secret = true } }

// FlagRegistrar registers flags whose default comes from an environment
// variable, so a DaemonSet's env configures the provider while an explicit
// command-line flag still wins.
type FlagRegistrar struct {
	flags *flag.FlagSet
}

// NewFlagRegistrar wraps flags.
func NewFlagRegistrar(flags *flag.FlagSet) *FlagRegistrar {
	return &FlagRegistrar{flags: flags}
}

// envValue returns the variable's value when it is set and non-empty.
func envValue(name string) (string, bool) {
	if name == "" {
		return "", false
	}
	v, ok := os.LookupEnv(name)
	return v, ok && v != ""
}

// StringWithEnv registers a string flag.
func (r *FlagRegistrar) StringWithEnv(field *string, flagName, hardcodedDefault, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		def = v
	}
	r.flags.StringVar(field, flagName, def, usage)
}

// IntWithEnv registers an int flag. The env value is read as upstream reads
// it, with fmt's %d verb: leading space is skipped and a leading decimal
// integer is taken, whatever follows it ("12abc" is 12); a value with no
// leading integer is ignored (parity_test.go).
func (r *FlagRegistrar) IntWithEnv(field *int, flagName string, hardcodedDefault int, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		var n int
		if _, err := fmt.Sscanf(v, "%d", &n); err == nil {
			def = n
		}
	}
	r.flags.IntVar(field, flagName, def, usage)
}

// UintWithEnv registers a uint flag.
func (r *FlagRegistrar) UintWithEnv(field *uint, flagName string, hardcodedDefault uint, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil {
			def = uint(n)
		}
	}
	r.flags.UintVar(field, flagName, def, usage)
}

// Uint64WithEnv registers a uint64 flag.
func (r *FlagRegistrar) Uint64WithEnv(field *uint64, flagName string, hardcodedDefault uint64, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		if n, err := strconv.ParseUint(v, 10, 64); err == nil {
			def = n
		}
	}
	r.flags.Uint64Var(field, flagName, def, usage)
}

// Float64WithEnv registers a float64 flag.
func (r *FlagRegistrar) Float64WithEnv(field *float64, flagName string, hardcodedDefault float64, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		if f, err := strconv.ParseFloat(v, 64); err == nil {
			def = f
		}
	}
	r.flags.Float64Var(field, flagName, def, usage)
}

// BoolWithEnv registers a bool flag; "1" and "true" (any case) are true,
// any other non-empty value is false, as upstream does.
func (r *FlagRegistrar) BoolWithEnv(field *bool, flagName string, hardcodedDefault bool, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		l := strings.ToLower(v)
		def = l == "1" || l == "true"
	}
	r.flags.BoolVar(field, flagName, def, usage)
}

// DurationWithEnv registers a time.Duration flag.
func (r *FlagRegistrar) DurationWithEnv(field *time.Duration, flagName string, hardcodedDefault time.Duration, envVarName, usage string, opts ...FlagOption) {
	def := hardcodedDefault
	if v, ok := envValue(envVarName); ok {
		if d, err := time.ParseDuration(v); err == nil {
			def = d
		}
	}
	r.flags.DurationVar(field, flagName, def, usage)
}

// CustomTypeWithEnv registers a flag.Value; the env value, else the
// hard-coded default, is Set on it first.
func (r *FlagRegistrar) CustomTypeWithEnv(field flag.Value, flagName, hardcodedDefault, envVarName, usage string, opts ...FlagOption) {
	if v, ok := envValue(envVarName); ok {
		_ = field.Set(v)
	} else if hardcodedDefault != "" {
		_ = field.Set(hardcodedDefault)
	}
	r.flags.Var(field, flagName, usage)
}

// DefaultToEnv fills an empty field from env, else from fallback.
func DefaultToEnv(field *string, env, fallback string) {
	if *field != "" {
		return
	}
	if v := os.Getenv(env); v != "" {
		*field = v
		return
	}
	*field = fallback
}

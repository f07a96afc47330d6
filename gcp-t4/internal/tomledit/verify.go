package tomledit

import (
	"fmt"
	"math"
	"reflect"
	"sort"
	"strings"

	toml "github.com/pelletier/go-toml/v2"
)

// Decode parses src with a real TOML parser.
func Decode(src []byte) (map[string]any, error) {
	var m map[string]any
	if err := toml.Unmarshal(src, &m); err != nil {
		return nil, err
	}
	if m == nil {
		m = map[string]any{}
	}
	return m, nil
}

// Leaves flattens a decoded document into dotted path → value. Arrays
// (including arrays of tables) are leaves; an empty table is a leaf too, so
// that losing it is noticed.
func Leaves(m map[string]any) map[string]any {
	out := map[string]any{}
	var walk func(prefix []string, v any)
	walk = func(prefix []string, v any) {
		t, ok := v.(map[string]any)
		if !ok || (len(t) == 0 && len(prefix) > 0) {
			out[FormatPath(prefix)] = v
			return
		}
		for k, child := range t {
			walk(append(append([]string(nil), prefix...), k), child)
		}
	}
	walk(nil, m)
	return out
}

// Change is one key an edit is meant to set.
type Change struct {
	Table []string
	Key   string
	Value any // as the TOML parser decodes it: string, bool, int64, []any
}

// Path is the dotted path of the change.
func (c Change) Path() string { return FormatPath(append(append([]string(nil), c.Table...), c.Key)) }

// Verify proves an edit did what it should and nothing else: after parses,
// every change holds, and every key of before that is not a change (nor
// below one) is still there with the same value.
func Verify(before, after []byte, changes []Change) error {
	b, err := Decode(before)
	if err != nil {
		return fmt.Errorf("original document does not parse: %w", err)
	}
	a, err := Decode(after)
	if err != nil {
		return fmt.Errorf("edited document does not parse: %w", err)
	}
	al := Leaves(a)
	changed := map[string]bool{}
	for _, c := range changes {
		p := c.Path()
		changed[p] = true
		got, ok := al[p]
		if !ok {
			return fmt.Errorf("edited document lacks %s", p)
		}
		if !sameValue(got, c.Value) {
			return fmt.Errorf("edited document has %s = %v, want %v", p, got, c.Value)
		}
	}
	var lost []string
	for p, v := range Leaves(b) {
		if changed[p] || belowChange(p, changed) {
			continue
		}
		got, ok := al[p]
		if !ok {
			// An empty table that gained keys is not a loss.
			if t, isTable := v.(map[string]any); isTable && len(t) == 0 && hasPrefixKey(al, p+".") {
				continue
			}
			lost = append(lost, p)
			continue
		}
		if !sameValue(got, v) {
			if t, isTable := v.(map[string]any); isTable && len(t) == 0 {
				continue
			}
			lost = append(lost, p+" (value changed)")
		}
	}
	if len(lost) > 0 {
		sort.Strings(lost)
		return fmt.Errorf("edit would lose or change keys it does not own: %s", strings.Join(lost, ", "))
	}
	return nil
}

func hasPrefixKey(m map[string]any, prefix string) bool {
	for k := range m {
		if strings.HasPrefix(k, prefix) {
			return true
		}
	}
	return false
}

// Apply runs changes on src with the line-level editor and verifies the
// result with the real parser; src is never modified. It returns src
// unchanged (same bytes) when every change already holds.
func Apply(src []byte, changes []Change, render func(any) (string, error)) ([]byte, error) {
	if _, err := Decode(src); err != nil {
		return nil, fmt.Errorf("not valid TOML, left untouched: %w", err)
	}
	d, err := Parse(src)
	if err != nil {
		return nil, err
	}
	m, _ := Decode(src)
	leaves := Leaves(m)
	for _, c := range changes {
		if v, ok := leaves[c.Path()]; ok && sameValue(v, c.Value) {
			continue
		}
		// The key holds a table (e.g. dotted keys under it): setting a
		// value there would redefine it, which only a person can sort out.
		if hasPrefixKey(leaves, c.Path()+".") {
			return nil, fmt.Errorf("%s is a table in this document, not a value: %w", c.Path(), ErrUnsupported)
		}
		text, err := render(c.Value)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", c.Path(), err)
		}
		if err := d.Set(c.Table, c.Key, text); err != nil {
			return nil, err
		}
	}
	out := d.Bytes()
	if err := Verify(src, out, changes); err != nil {
		return nil, err
	}
	return out, nil
}

// Render turns a decoded-style value into TOML source text.
func Render(v any) (string, error) {
	switch x := v.(type) {
	case string:
		return String(x), nil
	case bool:
		return Bool(x), nil
	case int64:
		return Int(x), nil
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			s, err := Render(e)
			if err != nil {
				return "", err
			}
			parts[i] = s
		}
		return "[" + strings.Join(parts, ", ") + "]", nil
	default:
		return "", fmt.Errorf("cannot render %T as TOML", v)
	}
}

func belowChange(p string, changed map[string]bool) bool {
	for c := range changed {
		if strings.HasPrefix(p, c+".") {
			return true
		}
	}
	return false
}

// sameValue is reflect.DeepEqual except that NaN equals NaN: `x = nan`
// is the same value before and after an edit.
func sameValue(a, b any) bool {
	switch x := a.(type) {
	case float64:
		y, ok := b.(float64)
		return ok && (x == y || math.IsNaN(x) && math.IsNaN(y))
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !sameValue(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for k, v := range x {
			if w, ok := y[k]; !ok || !sameValue(v, w) {
				return false
			}
		}
		return true
	}
	return reflect.DeepEqual(a, b)
}

// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// decodeStrict decodes a request body the way GCE's front end does: unknown
// field names are rejected (protojson would report them without a path, and
// DiscardUnknown would hide caller typos), then string fields backed by a
// computepb enum are checked against that enum.
func decodeStrict(body []byte, root string, m proto.Message) error {
	if len(bytes.TrimSpace(body)) == 0 {
		return invalidf("Required field '%s' not specified", root)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		return invalidf("Invalid JSON payload received. %v", err)
	}
	if err := checkUnknownFields(generic, m.ProtoReflect().Descriptor(), root); err != nil {
		return err
	}
	if err := protojson.Unmarshal(body, m); err != nil {
		return invalidf("Invalid JSON payload received. %s", strings.TrimPrefix(err.Error(), "proto: "))
	}
	return checkEnums(m.ProtoReflect(), root)
}

// checkUnknownFields walks decoded JSON alongside the message descriptor and
// reports the first name the descriptor does not know, in GCE's wording.
func checkUnknownFields(v any, md protoreflect.MessageDescriptor, path string) error {
	obj, ok := v.(map[string]any)
	if !ok {
		// Type mismatches are left to protojson, which reports them.
		return nil
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fd := md.Fields().ByJSONName(k)
		if fd == nil {
			fd = md.Fields().ByName(protoreflect.Name(k))
		}
		if fd == nil {
			return invalidf("Invalid JSON payload received. Unknown name %q at '%s': Cannot find field.", k, path)
		}
		child := obj[k]
		sub := path + "." + fd.JSONName()
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			mv, _ := child.(map[string]any)
			for _, mk := range sortedKeys(mv) {
				if err := checkUnknownFields(mv[mk], fd.MapValue().Message(), sub+"."+mk); err != nil {
					return err
				}
			}
		case fd.IsList():
			if fd.Kind() != protoreflect.MessageKind {
				continue
			}
			arr, _ := child.([]any)
			for i, el := range arr {
				if err := checkUnknownFields(el, fd.Message(), fmt.Sprintf("%s[%d]", sub, i)); err != nil {
					return err
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if err := checkUnknownFields(child, fd.Message(), sub); err != nil {
				return err
			}
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// enumFor finds the enum that constrains a string field. computepb models
// enum-valued fields as strings and nests the enum in the field's message
// under the field's CamelCase name (Scheduling.on_host_maintenance ->
// Scheduling.OnHostMaintenance); fields without such an enum are free text.
func enumFor(fd protoreflect.FieldDescriptor) protoreflect.EnumDescriptor {
	if fd.Kind() != protoreflect.StringKind {
		return nil
	}
	parent, ok := fd.Parent().(protoreflect.MessageDescriptor)
	if !ok {
		return nil
	}
	return parent.Enums().ByName(protoreflect.Name(camel(string(fd.Name()))))
}

func camel(snake string) string {
	var b strings.Builder
	for _, part := range strings.Split(snake, "_") {
		if part == "" {
			continue
		}
		b.WriteString(strings.ToUpper(part[:1]))
		b.WriteString(part[1:])
	}
	return b.String()
}

// enumAccepts reports whether value is a real value of ed. The zero values
// named UNDEFINED_* only mean "unset" in the generated code and are not
// accepted by GCE.
func enumAccepts(ed protoreflect.EnumDescriptor, value string) bool {
	if strings.HasPrefix(value, "UNDEFINED_") {
		return false
	}
	return ed.Values().ByName(protoreflect.Name(value)) != nil
}

func enumValues(ed protoreflect.EnumDescriptor) []string {
	var out []string
	for i := 0; i < ed.Values().Len(); i++ {
		n := string(ed.Values().Get(i).Name())
		if !strings.HasPrefix(n, "UNDEFINED_") {
			out = append(out, n)
		}
	}
	return out
}

// checkEnums walks every set field (in declaration order, for a stable first
// error) and validates enum-backed strings, recursing into messages, lists
// and maps.
func checkEnums(m protoreflect.Message, path string) error {
	fields := m.Descriptor().Fields()
	for i := 0; i < fields.Len(); i++ {
		fd := fields.Get(i)
		if !m.Has(fd) {
			continue
		}
		v := m.Get(fd)
		sub := path + "." + fd.JSONName()
		switch {
		case fd.IsMap():
			if fd.MapValue().Kind() != protoreflect.MessageKind {
				continue
			}
			keys := []string{}
			v.Map().Range(func(k protoreflect.MapKey, _ protoreflect.Value) bool {
				keys = append(keys, k.String())
				return true
			})
			sort.Strings(keys)
			for _, k := range keys {
				mv := v.Map().Get(protoreflect.ValueOfString(k).MapKey())
				if err := checkEnums(mv.Message(), sub+"."+k); err != nil {
					return err
				}
			}
		case fd.IsList():
			l := v.List()
			for j := 0; j < l.Len(); j++ {
				ep := fmt.Sprintf("%s[%d]", sub, j)
				if fd.Kind() == protoreflect.MessageKind {
					if err := checkEnums(l.Get(j).Message(), ep); err != nil {
						return err
					}
					continue
				}
				if err := checkEnumValue(fd, l.Get(j), ep); err != nil {
					return err
				}
			}
		case fd.Kind() == protoreflect.MessageKind:
			if err := checkEnums(v.Message(), sub); err != nil {
				return err
			}
		default:
			if err := checkEnumValue(fd, v, sub); err != nil {
				return err
			}
		}
	}
	return nil
}

func checkEnumValue(fd protoreflect.FieldDescriptor, v protoreflect.Value, path string) error {
	ed := enumFor(fd)
	if ed == nil {
		return nil
	}
	if s := v.String(); !enumAccepts(ed, s) {
		return invalidField(path, s, fmt.Sprintf("Value must be one of [%s].", strings.Join(enumValues(ed), ", ")))
	}
	return nil
}

// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcefake

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"cloud.google.com/go/compute/apiv1/computepb"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// apiModuleDir locates google.golang.org/api in the module cache. The repo
// uses a go.work that names a module the proxy cannot resolve, so the lookup
// runs with GOWORK=off from this module; the workspace is the fallback.
func apiModuleDir(t *testing.T) string {
	t.Helper()
	var lastErr error
	for _, env := range [][]string{{"GOWORK=off"}, nil} {
		cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "google.golang.org/api")
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.Output()
		if err != nil {
			lastErr = err
			if ee, ok := err.(*exec.ExitError); ok {
				t.Logf("go list (%v): %s", env, ee.Stderr)
			}
			continue
		}
		if dir := strings.TrimSpace(string(out)); dir != "" {
			return dir
		}
	}
	t.Fatalf("cannot locate google.golang.org/api module directory: %v", lastErr)
	return ""
}

type discoveryProperty struct {
	Enum  []string `json:"enum"`
	Items *struct {
		Enum []string `json:"enum"`
	} `json:"items"`
}

type discoveryDoc struct {
	Schemas map[string]struct {
		Properties map[string]discoveryProperty `json:"properties"`
	} `json:"schemas"`
}

// TestEnumsMatchDiscovery checks the generic enum validator against the
// Compute discovery document: every documented value is accepted and a
// made-up value is rejected, for the schemas the provider sends.
func TestEnumsMatchDiscovery(t *testing.T) {
	path := filepath.Join(apiModuleDir(t), "compute", "v1", "compute-api.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("reading discovery document: %v", err)
	}
	var doc discoveryDoc
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("parsing %s: %v", path, err)
	}
	messages := map[string]proto.Message{
		"Instance":                   &computepb.Instance{},
		"Scheduling":                 &computepb.Scheduling{},
		"AttachedDisk":               &computepb.AttachedDisk{},
		"NetworkInterface":           &computepb.NetworkInterface{},
		"ConfidentialInstanceConfig": &computepb.ConfidentialInstanceConfig{},
	}
	checked := 0
	for schema, msg := range messages {
		props := doc.Schemas[schema].Properties
		if len(props) == 0 {
			t.Fatalf("schema %s missing from discovery document", schema)
		}
		md := msg.ProtoReflect().Descriptor()
		for prop, p := range props {
			values, repeated := p.Enum, false
			if len(values) == 0 && p.Items != nil {
				values, repeated = p.Items.Enum, true
			}
			if len(values) == 0 {
				continue
			}
			fd := md.Fields().ByJSONName(prop)
			if fd == nil {
				t.Errorf("%s.%s: no such field in computepb", schema, prop)
				continue
			}
			if enumFor(fd) == nil {
				t.Errorf("%s.%s: validator finds no enum for this field", schema, prop)
				continue
			}
			set := func(v string) proto.Message {
				m := msg.ProtoReflect().New()
				if repeated {
					l := m.Mutable(fd).List()
					l.Append(protoreflect.ValueOfString(v))
				} else {
					m.Set(fd, protoreflect.ValueOfString(v))
				}
				return m.Interface()
			}
			for _, v := range values {
				if err := checkEnums(set(v).ProtoReflect(), "resource"); err != nil {
					t.Errorf("%s.%s = %q rejected: %v", schema, prop, v, err)
				}
				checked++
			}
			if err := checkEnums(set("MADE_UP_VALUE").ProtoReflect(), "resource"); err == nil {
				t.Errorf("%s.%s: made-up value accepted", schema, prop)
			} else if !strings.Contains(err.Error(), "'resource."+prop+"': 'MADE_UP_VALUE'") {
				t.Errorf("%s.%s: error does not name the field: %v", schema, prop, err)
			}
		}
	}
	if checked < 40 {
		t.Fatalf("only %d enum values checked; discovery parsing is broken", checked)
	}
}

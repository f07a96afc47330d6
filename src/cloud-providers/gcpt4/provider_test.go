// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package gcpt4

import (
	"context"
	"log"
	"strings"
	"testing"

	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
)

// sandbox and oneT4 are shared by the tests with and without the emulator.
const sandbox = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

var oneT4 = provider.InstanceTypeSpec{GPUs: 1, VCPUs: 2, Memory: 8192}

func TestConfidentialT4Refused(t *testing.T) {
	_, err := catalog.New("", `profiles: [{name: t4-cc, machineType: n1-standard-4, accelerator: nvidia-tesla-t4, confidentialType: SEV}]`)
	if err == nil || !strings.Contains(err.Error(), "h100-cc") {
		t.Fatalf("want a refusal pointing to h100-cc, got %v", err)
	}
}

// TestDefaultLoggerIsUpstreamsStyle: with no logger given, the provider logs
// as upstream's providers do (src/cloud-providers/gcp/provider.go at
// v0.22.0): the standard logger's writer, its own prefix, LstdFlags|Lmsgprefix.
func TestDefaultLoggerIsUpstreamsStyle(t *testing.T) {
	cfg := validConfig()
	cfg.Endpoint = "http://127.0.0.1:1" // nothing is called
	p, err := NewProvider(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = p.Teardown() }()
	if p.log.Prefix() != "[adaptor/cloud/gcp-t4] " || p.log.Flags() != log.LstdFlags|log.Lmsgprefix || p.log.Writer() != log.Writer() {
		t.Errorf("default logger: prefix %q, flags %#x, writer %T", p.log.Prefix(), p.log.Flags(), p.log.Writer())
	}
	vlog := p.vmLogger("pod a, podVM b: ")
	if vlog.Prefix() != "[adaptor/cloud/gcp-t4] pod a, podVM b: " || vlog.Flags() != p.log.Flags() || vlog.Writer() != p.log.Writer() {
		t.Errorf("vmLogger: prefix %q, flags %#x", vlog.Prefix(), vlog.Flags())
	}
}

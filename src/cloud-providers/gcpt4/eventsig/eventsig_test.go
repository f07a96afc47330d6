// (C) Copyright Confidential Containers Contributors
// SPDX-License-Identifier: Apache-2.0

package eventsig

import (
	"bytes"
	"encoding/json"
	"testing"
)

func fields() Fields {
	return Fields{Namespace: "ml", Name: "llm-0.gcp-t4-0123", Kind: "Pod", Object: "llm-0", ObjectUID: "uid-1",
		Reason: "PodVMCreated", Type: "Normal", Message: "created \xff\xfe podvm", Labels: map[string]string{"caa-gcp-t4/phase": "created"},
		Annotations: map[string]string{"caa-gcp-t4/zone": "us-central1-a"}}
}

func TestSignVerify(t *testing.T) {
	key := bytes.Repeat([]byte{1}, KeySize)
	f := fields()
	f.Annotations[SignatureAnnotation] = Sign(key, f)
	if !Verify(key, f) {
		t.Fatal("a signed Event does not verify")
	}
	// As a reader decodes it: the JSON round trip turns the invalid byte
	// into U+FFFD, as the API server stores it.
	b, _ := json.Marshal(f)
	var g Fields
	if err := json.Unmarshal(b, &g); err != nil {
		t.Fatal(err)
	}
	if g.Message == f.Message || !Verify(key, g) {
		t.Errorf("the decoded Event (message %q) does not verify", g.Message)
	}
	for name, k := range map[string][]byte{"another key": bytes.Repeat([]byte{2}, KeySize), "no key": nil} {
		if Verify(k, f) {
			t.Errorf("verifies under %s", name)
		}
	}
	for _, sig := range []string{"", "x", f.Annotations[SignatureAnnotation] + "A", "!" + f.Annotations[SignatureAnnotation][1:]} {
		h := fields()
		h.Annotations[SignatureAnnotation] = sig
		if Verify(key, h) {
			t.Errorf("signature %q verifies", sig)
		}
	}
}

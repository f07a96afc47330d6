package testkey

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestServiceAccount(t *testing.T) {
	b, err := ServiceAccount("caa@demo-project.iam.gserviceaccount.com", "abc123")
	if err != nil {
		t.Fatal(err)
	}
	var k map[string]string
	if err := json.Unmarshal(b, &k); err != nil {
		t.Fatal(err)
	}
	if k["type"] != "service_account" || k["project_id"] != "demo-project" || k["private_key_id"] != "abc123" ||
		k["client_email"] != "caa@demo-project.iam.gserviceaccount.com" || !strings.HasPrefix(k["private_key"], "-----BEGIN PRIVATE KEY-----") {
		t.Errorf("key = %v", k)
	}
	if _, err := ServiceAccount("someone@example.com", "x"); err == nil || !strings.Contains(err.Error(), "NAME@PROJECT.iam.gserviceaccount.com") {
		t.Errorf("a non-service-account email: %v", err)
	}
}

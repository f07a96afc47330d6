package startup

import (
	"strings"
	"testing"
)

func TestCatalogueLoads(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	if c.InstallCreateContainerTimeout() <= 0 {
		t.Fatal("no create_container_timeout for install")
	}
}

func TestCatalogueRefusesUncitedRows(t *testing.T) {
	bad := strings.Replace(string(catalogYAML), "source: cri-client\n", "source: nowhere\n", 1)
	if _, err := Parse([]byte(bad)); err == nil || !strings.Contains(err.Error(), `"nowhere" is not listed`) {
		t.Fatalf("an uncited deadline was accepted: %v", err)
	}
}

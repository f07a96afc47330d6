package cloudinit

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v2"
)

func TestGenerateIsValidCloudConfig(t *testing.T) {
	in := &CloudConfig{WriteFiles: []WriteFile{
		{Path: "/run/peerpod/apf.json", Content: "{\"a\": 1,\n \"b\": \"x: y\"}\n", Permissions: "0600"},
		{Path: "/run/peerpod/auth.json", Content: "secret", Owner: "root:root", Encoding: "b64"},
	}}
	out, err := in.Generate()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "#cloud-config\n") {
		t.Fatalf("missing #cloud-config header:\n%s", out)
	}
	var back CloudConfig
	if err := yaml.UnmarshalStrict([]byte(out), &back); err != nil {
		t.Fatalf("output is not YAML: %v\n%s", err, out)
	}
	if len(back.WriteFiles) != 2 || back.WriteFiles[0].Content != in.WriteFiles[0].Content || back.WriteFiles[0].Permissions != "0600" ||
		back.WriteFiles[1].Content != "secret\n" || back.WriteFiles[1].Owner != "root:root" {
		t.Fatalf("round trip lost data: %+v", back.WriteFiles)
	}
}

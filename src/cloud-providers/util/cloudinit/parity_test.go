package cloudinit

import "testing"

// Expectations are what upstream's CloudConfig.Generate returns at v0.22.0
// (commit 38d0fcf7, src/cloud-providers/util/cloudinit/cloudconfig.go line 82,
// its text/template and splitLines), measured by running that code on these
// inputs, byte for byte: the podVM's cloud-init reads the same document
// whichever module rendered it.
func TestGenerateAsUpstream(t *testing.T) {
	const head = "#cloud-config\n\nwrite_files:\n  - path: /a\n"
	for _, tc := range []struct {
		files []WriteFile
		want  string
	}{
		{nil, "#cloud-config\n"},
		{[]WriteFile{}, "#cloud-config\n"},
		{[]WriteFile{{Path: "/a"}}, head},
		{[]WriteFile{{Path: "/a", Content: "x"}}, head + "    content: |\n      x\n"},
		{[]WriteFile{{Path: "/a", Content: "x\n"}}, head + "    content: |\n      x\n"},
		{[]WriteFile{{Path: "/a", Content: "x\n\n"}}, head + "    content: |\n      x\n      \n"},
		{[]WriteFile{{Path: "/a", Content: "\n"}}, head + "    content: |\n      \n"},
		{[]WriteFile{
			{Path: "/a", Content: "l1\nl2", Owner: "root:root", Permissions: "0600", Encoding: "b64", Append: "true"},
			{Path: "/b", Content: "{\"k\": \"v: w\"}"},
		}, head + "    owner: root:root\n    permissions: 0600\n    encoding: b64\n    append: true\n    content: |\n      l1\n      l2\n" +
			"  - path: /b\n    content: |\n      {\"k\": \"v: w\"}\n"},
	} {
		got, err := (&CloudConfig{WriteFiles: tc.files}).Generate()
		if err != nil || got != tc.want {
			t.Errorf("Generate(%+v) = %q, %v; upstream gives %q, <nil>", tc.files, got, err, tc.want)
		}
	}
}

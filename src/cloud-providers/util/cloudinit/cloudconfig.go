// Package cloudinit renders the cloud-config the adaptor hands to a podVM.
package cloudinit

import (
	"strings"
)

// CloudConfigGenerator produces the user data for a podVM.
type CloudConfigGenerator interface {
	Generate() (string, error)
}

// CloudConfig is a #cloud-config document with write_files only.
type CloudConfig struct {
	WriteFiles []WriteFile `yaml:"write_files"`
}

// WriteFile is one write_files entry.
type WriteFile struct {
	Path        string `yaml:"path"`
	Content     string `yaml:"content,omitempty"`
	Owner       string `yaml:"owner,omitempty"`
	Permissions string `yaml:"permissions,omitempty"`
	Encoding    string `yaml:"encoding,omitempty"`
	Append      string `yaml:"append,omitempty"`
}

// Generate renders the document; content goes in YAML literal blocks so
// JSON and certificates pass through unchanged.
func (c *CloudConfig) Generate() (string, error) {
	var b strings.Builder
	b.WriteString("#cloud-config\n")
	if len(c.WriteFiles) == 0 {
		return b.String(), nil
	}
	b.WriteString("\nwrite_files:\n")
	for _, f := range c.WriteFiles {
		b.WriteString("  - path: " + f.Path + "\n")
		for _, kv := range [][2]string{{"owner", f.Owner}, {"permissions", f.Permissions}, {"encoding", f.Encoding}, {"append", f.Append}} {
			if kv[1] != "" {
				b.WriteString("    " + kv[0] + ": " + kv[1] + "\n")
			}
		}
		if f.Content != "" {
			b.WriteString("    content: |\n")
			for _, line := range strings.Split(strings.TrimSuffix(f.Content, "\n"), "\n") {
				b.WriteString("      " + line + "\n")
			}
		}
	}
	return b.String(), nil
}

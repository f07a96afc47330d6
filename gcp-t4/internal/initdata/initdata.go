// Package initdata is a pod's initdata as its annotation carries it to the
// podVM: the one place that names the annotation and encodes and decodes
// its value, for cache initdata (which writes it), cache check and plan
// (which read it).
package initdata

import (
	"bytes"
	"compress/gzip"
	"encoding/base64"
	"fmt"
	"io"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
)

// Annotation carries a pod's initdata to its podVM: kata's shim reads it
// (kata cf82bb35 src/runtime/virtcontainers/pkg/annotations/annotations.go,
// pkg/oci/utils.go addHypervisorInitdataOverrides) and passes it to CAA
// (v0.22.0 pkg/util/cloud.go), which puts it in the podVM's user-data.
const Annotation = annotations.InitData

// maxText bounds what Decode reads: an initdata is a few kB of TOML.
const maxText = 1 << 20

// Encode is the annotation's value for an initdata TOML: base64
// (standard, padded) of gzip, as kata's shim decodes it. gzip's header
// records no name and no time, so the same TOML gives the same value.
func Encode(text string) (string, error) {
	var gz bytes.Buffer
	w := gzip.NewWriter(&gz)
	if _, err := io.WriteString(w, text); err != nil {
		return "", err
	}
	if err := w.Close(); err != nil {
		return "", err
	}
	return base64.StdEncoding.EncodeToString(gz.Bytes()), nil
}

// Decode is the initdata TOML an annotation value carries.
func Decode(v string) (string, error) {
	r, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(strings.TrimSpace(v))))
	if err != nil {
		return "", fmt.Errorf("not base64 of gzip data: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(r, maxText))
	if err != nil {
		return "", fmt.Errorf("not base64 of gzip data: %w", err)
	}
	return string(b), nil
}

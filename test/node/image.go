package node

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"runtime"
)

// writeImage writes an OCI image layout, as a tar that `ctr images import`
// reads, holding one image: a single uncompressed layer with the static
// binary at /sleeper as its entrypoint. There is no registry on this
// network, so the pod's image and the sandbox ("pause") image are this one,
// imported into containerd's store before kubelet asks for it.
func writeImage(path, binary, name string) error {
	bin, err := os.ReadFile(binary)
	if err != nil {
		return fmt.Errorf("node: image binary: %w", err)
	}
	var layer bytes.Buffer
	lw := tar.NewWriter(&layer)
	if err := lw.WriteHeader(&tar.Header{Name: "sleeper", Mode: 0o755, Size: int64(len(bin)), Typeflag: tar.TypeReg}); err != nil {
		return fmt.Errorf("node: image layer: %w", err)
	}
	if _, err := lw.Write(bin); err != nil {
		return fmt.Errorf("node: image layer: %w", err)
	}
	if err := lw.Close(); err != nil {
		return fmt.Errorf("node: image layer: %w", err)
	}
	layerDigest := digest(layer.Bytes())
	config, err := json.Marshal(map[string]any{
		"architecture": runtime.GOARCH,
		"os":           "linux",
		"config":       map[string]any{"Entrypoint": []string{"/sleeper"}},
		"rootfs":       map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	})
	if err != nil {
		return err
	}
	manifest, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.manifest.v1+json",
		"config":        descriptor("application/vnd.oci.image.config.v1+json", config),
		"layers":        []any{descriptor("application/vnd.oci.image.layer.v1.tar", layer.Bytes())},
	})
	if err != nil {
		return err
	}
	mdesc := descriptor("application/vnd.oci.image.manifest.v1+json", manifest)
	mdesc["platform"] = map[string]string{"architecture": runtime.GOARCH, "os": "linux"}
	// ctr names the image from this annotation.
	mdesc["annotations"] = map[string]string{"io.containerd.image.name": name}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"mediaType":     "application/vnd.oci.image.index.v1+json",
		"manifests":     []any{mdesc},
	})
	if err != nil {
		return err
	}
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	files := []struct {
		name string
		data []byte
	}{
		{"oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`)},
		{"index.json", index},
		{blobPath(layer.Bytes()), layer.Bytes()},
		{blobPath(config), config},
		{blobPath(manifest), manifest},
	}
	for _, f := range files {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return fmt.Errorf("node: image tar: %w", err)
		}
		if _, err := tw.Write(f.data); err != nil {
			return fmt.Errorf("node: image tar: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("node: image tar: %w", err)
	}
	if err := os.WriteFile(path, out.Bytes(), 0o600); err != nil {
		return fmt.Errorf("node: image tar: %w", err)
	}
	return nil
}

func digest(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

func blobPath(b []byte) string {
	sum := sha256.Sum256(b)
	return "blobs/sha256/" + hex.EncodeToString(sum[:])
}

func descriptor(mediaType string, b []byte) map[string]any {
	return map[string]any{"mediaType": mediaType, "digest": digest(b), "size": len(b)}
}

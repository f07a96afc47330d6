package plan

import (
	"bytes"
	"fmt"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// readKustomization renders dir with kustomize's Go API, the engine
// `kubectl apply -k` embeds and `gcp-t4 install` renders its tree with, so
// the objects planned carry the kustomization's namespace, name prefixes
// and patches: a RayService in a kustomization with namespace: mistral-tp2
// gets podVMs labelled caa-namespace=mistral-tp2, as the cluster would.
func readKustomization(dir string) ([]Workload, []string, error) {
	opts := krusty.MakeDefaultOptions()
	// As kubectl apply -k without --reorder (install's renderDir does the
	// same): the kustomization's sortOptions, else the legacy order.
	opts.Reorder = krusty.ReorderOptionUnspecified
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	y, err := m.AsYaml()
	if err != nil {
		return nil, nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	w, s, err := ParseManifests(bytes.NewReader(y))
	if err != nil {
		return nil, nil, fmt.Errorf("-k %s: %w", dir, err)
	}
	return w, s, nil
}

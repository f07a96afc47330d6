package install

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/kustomize/api/resmap"
)

// FieldManager owns every field the installer applies.
const FieldManager = "gcp-t4"

// InventoryName is the ConfigMap (in Namespace) that records what install
// applied, so uninstall removes exactly that and a re-install with other
// settings prunes what it no longer renders.
const InventoryName = "gcp-t4-install"

// Ref names one object.
type Ref struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
}

func (r Ref) String() string {
	if r.Namespace == "" {
		return fmt.Sprintf("%s/%s", r.Kind, r.Name)
	}
	return fmt.Sprintf("%s/%s/%s", r.Kind, r.Namespace, r.Name)
}

func (r Ref) gvk() schema.GroupVersionKind {
	return schema.FromAPIVersionAndKind(r.APIVersion, r.Kind)
}

// Inventory is what one install applied. Adopted objects existed before
// and were not made by these manifests (say, a namespace the CoCo operator
// created): they are updated but never deleted.
type Inventory struct {
	Objects []Ref `json:"objects"`
	Adopted []Ref `json:"adopted,omitempty"`
}

func (inv Inventory) has(r Ref) bool {
	for _, o := range inv.Objects {
		if o == r {
			return true
		}
	}
	return false
}

func (inv Inventory) adopted(r Ref) bool {
	for _, o := range inv.Adopted {
		if o == r {
			return true
		}
	}
	return false
}

// kindRank orders applies so that what an object refers to exists first
// (namespace, then identities and configuration, the DaemonSet last);
// deletes run the other way.
var kindRank = map[string]int{
	"Namespace": 0, "RuntimeClass": 1, "ServiceAccount": 2, "ClusterRole": 3, "Role": 3,
	"ClusterRoleBinding": 4, "RoleBinding": 4, "ConfigMap": 5, "Secret": 5, "DaemonSet": 9,
}

func rank(kind string) int {
	if r, ok := kindRank[kind]; ok {
		return r
	}
	return 6
}

func lessRef(a, b Ref) bool {
	if rank(a.Kind) != rank(b.Kind) {
		return rank(a.Kind) < rank(b.Kind)
	}
	if a.Kind != b.Kind {
		return a.Kind < b.Kind
	}
	if a.Namespace != b.Namespace {
		return a.Namespace < b.Namespace
	}
	return a.Name < b.Name
}

func sortRefs(refs []Ref) {
	sort.SliceStable(refs, func(i, j int) bool { return lessRef(refs[i], refs[j]) })
}

// Objects turns a rendering into unstructured objects in apply order.
func Objects(m resmap.ResMap) ([]*unstructured.Unstructured, error) {
	var objs []*unstructured.Unstructured
	for _, r := range m.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			return nil, fmt.Errorf("rendered %s: %w", r.CurId(), err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(data); err != nil {
			return nil, fmt.Errorf("rendered %s: %w", r.CurId(), err)
		}
		objs = append(objs, u)
	}
	sort.SliceStable(objs, func(i, j int) bool { return lessRef(refOf(objs[i]), refOf(objs[j])) })
	return objs, nil
}

func refOf(u *unstructured.Unstructured) Ref {
	return Ref{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(), Name: u.GetName()}
}

// Cluster is what the installer needs from the API server.
type Cluster struct {
	Dynamic dynamic.Interface
	Mapper  meta.RESTMapper
}

func (c Cluster) resource(r Ref) (dynamic.ResourceInterface, error) {
	m, err := c.Mapper.RESTMapping(r.gvk().GroupKind(), r.gvk().Version)
	if err != nil {
		return nil, fmt.Errorf("%s: the API server does not serve %s: %w", r, r.APIVersion, err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return c.Dynamic.Resource(m.Resource).Namespace(r.Namespace), nil
	}
	return c.Dynamic.Resource(m.Resource), nil
}

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// ForceConflicts takes over fields another manager set to other values
	// (kubectl apply --server-side --force-conflicts).
	ForceConflicts bool
}

// ApplyResult says what changed.
type ApplyResult struct {
	Changed   []Ref // created or modified
	Unchanged []Ref
	Pruned    []Ref // in the previous inventory, no longer rendered
}

// Apply server-side-applies objs (field manager gcp-t4, strict field
// validation), records the inventory, and deletes what the previous
// inventory had and this rendering no longer has.
func (c Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	prev, err := c.ReadInventory(ctx)
	if err != nil {
		return res, err
	}
	var inv Inventory
	for _, o := range objs {
		r := refOf(o)
		ri, err := c.resource(r)
		if err != nil {
			return res, err
		}
		before, err := ri.Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			before = nil
		case err != nil:
			return res, fmt.Errorf("read %s: %w", r, err)
		}
		if before != nil && (prev.adopted(r) || (!prev.has(r) && before.GetLabels()[PartOfLabel] != PartOfValue)) {
			inv.Adopted = append(inv.Adopted, r)
		}
		after, err := c.applyOne(ctx, ri, o, opts.ForceConflicts)
		if err != nil {
			return res, fmt.Errorf("apply %s: %w", r, err)
		}
		inv.Objects = append(inv.Objects, r)
		if before != nil && before.GetResourceVersion() == after.GetResourceVersion() {
			res.Unchanged = append(res.Unchanged, r)
		} else {
			res.Changed = append(res.Changed, r)
		}
	}
	invObj, err := inventoryObject(inv)
	if err != nil {
		return res, err
	}
	ri, err := c.resource(refOf(invObj))
	if err != nil {
		return res, err
	}
	if _, err := c.applyOne(ctx, ri, invObj, opts.ForceConflicts); err != nil {
		return res, fmt.Errorf("record inventory %s/%s: %w", Namespace, InventoryName, err)
	}
	var stale []Ref
	for _, r := range prev.Objects {
		if !inv.has(r) && !prev.adopted(r) {
			stale = append(stale, r)
		}
	}
	if err := c.deleteAll(ctx, stale); err != nil {
		return res, fmt.Errorf("prune objects the new settings no longer render: %w", err)
	}
	res.Pruned = stale
	return res, nil
}

func (c Cluster) applyOne(ctx context.Context, ri dynamic.ResourceInterface, o *unstructured.Unstructured, force bool) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	out, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, metav1.PatchOptions{
		FieldManager:    FieldManager,
		Force:           &force,
		FieldValidation: "Strict",
	})
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("%w; another field manager set these fields to other values: rerun with --force-conflicts to take them over", err)
	}
	return out, err
}

func inventoryObject(inv Inventory) (*unstructured.Unstructured, error) {
	sortRefs(inv.Objects)
	sortRefs(inv.Adopted)
	objects, err := json.Marshal(inv.Objects)
	if err != nil {
		return nil, err
	}
	adopted, err := json.Marshal(inv.Adopted)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1",
		"kind":       "ConfigMap",
		"metadata": map[string]any{
			"name":      InventoryName,
			"namespace": Namespace,
			"labels":    map[string]any{PartOfLabel: PartOfValue},
		},
		"data": map[string]any{"objects": string(objects), "adopted": string(adopted)},
	}}
	return u, nil
}

// release drops every field only the installer owns in an object it did
// not create: server-side apply of an empty configuration removes what the
// field manager set before (labels on an adopted namespace, say).
func (c Cluster) release(ctx context.Context, r Ref) error {
	ri, err := c.resource(r)
	if err != nil {
		return err
	}
	md := map[string]any{"name": r.Name}
	if r.Namespace != "" {
		md["namespace"] = r.Namespace
	}
	empty := &unstructured.Unstructured{Object: map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "metadata": md}}
	_, err = c.applyOne(ctx, ri, empty, false)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("release %s: %w", r, err)
	}
	return nil
}

// ReadInventory returns the recorded inventory; empty when none.
func (c Cluster) ReadInventory(ctx context.Context) (Inventory, error) {
	var inv Inventory
	ri, err := c.resource(Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: Namespace, Name: InventoryName})
	if err != nil {
		return inv, err
	}
	u, err := ri.Get(ctx, InventoryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return inv, nil
	}
	if err != nil {
		return inv, fmt.Errorf("read inventory %s/%s: %w", Namespace, InventoryName, err)
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	if err := json.Unmarshal([]byte(data["objects"]), &inv.Objects); err != nil {
		return inv, fmt.Errorf("inventory %s/%s: objects: %w; delete it and re-run install to rebuild it", Namespace, InventoryName, err)
	}
	if data["adopted"] != "" {
		if err := json.Unmarshal([]byte(data["adopted"]), &inv.Adopted); err != nil {
			return inv, fmt.Errorf("inventory %s/%s: adopted: %w; delete it and re-run install to rebuild it", Namespace, InventoryName, err)
		}
	}
	return inv, nil
}

// deleteAll deletes refs in reverse apply order and waits until they are gone.
func (c Cluster) deleteAll(ctx context.Context, refs []Ref) error {
	refs = append([]Ref(nil), refs...)
	sortRefs(refs)
	bg := metav1.DeletePropagationBackground
	for i := len(refs) - 1; i >= 0; i-- {
		r := refs[i]
		ri, err := c.resource(r)
		if err != nil {
			return err
		}
		if err := ri.Delete(ctx, r.Name, metav1.DeleteOptions{PropagationPolicy: &bg}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("delete %s: %w", r, err)
		}
	}
	return c.waitGone(ctx, refs)
}

func (c Cluster) waitGone(ctx context.Context, refs []Ref) error {
	var left []string // as of the last complete look
	err := wait.PollUntilContextCancel(ctx, goneInterval, true, func(ctx context.Context) (bool, error) {
		var present []string
		for _, r := range refs {
			ri, err := c.resource(r)
			if err != nil {
				return false, err
			}
			_, err = ri.Get(ctx, r.Name, metav1.GetOptions{})
			switch {
			case apierrors.IsNotFound(err):
			case err != nil && ctx.Err() != nil:
				return false, nil // the loop reports the context's end
			case err != nil:
				return false, fmt.Errorf("check %s is gone: %w", r, err)
			default:
				present = append(present, r.String())
			}
		}
		left = present
		return len(left) == 0, nil
	})
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("still present: %v: %w", left, err)
	}
	return err
}

// goneInterval is how often waitGone looks again: deletions with
// finalizers (a namespace) take seconds.
const goneInterval = 250 * time.Millisecond

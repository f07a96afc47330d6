package install

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
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
	"ClusterRoleBinding": 4, "RoleBinding": 4, "ConfigMap": 5, "Secret": 5,
	// The cost guard's binding after its policy and its limits ConfigMap,
	// and deleted before them: a binding without its ConfigMap refuses
	// every pod of the cluster (components/cost-guard/policy.yaml).
	"ValidatingAdmissionPolicy": 7, "ValidatingAdmissionPolicyBinding": 8, "DaemonSet": 9,
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
	// Namespace holds the inventory; "" is Namespace.
	Namespace string
}

func (c Cluster) ns() string {
	if c.Namespace == "" {
		return Namespace
	}
	return c.Namespace
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
	// DryRun has the API server validate and default every object
	// (server-side dry run) and persists nothing, inventory included.
	DryRun bool
}

// ApplyResult says what changed.
type ApplyResult struct {
	Changed   []Ref // created or modified
	Unchanged []Ref
	// Stale were in the previous inventory and are no longer rendered.
	// Apply leaves them (and the inventory lists them) until Prune, which
	// install calls once the rollout is done, so a pod of the old
	// revision that restarts meanwhile still finds what it reads.
	Stale []Ref
}

// Apply server-side-applies objs (field manager gcp-t4, strict field
// validation). The inventory is written before any object but the
// namespace that holds it, and lists everything this run may leave behind
// (the previous objects and the new ones), so an install that fails half
// way can still be uninstalled.
func (c Cluster) Apply(ctx context.Context, objs []*unstructured.Unstructured, opts ApplyOptions) (ApplyResult, error) {
	var res ApplyResult
	prev, err := c.ReadInventory(ctx)
	if err != nil {
		return res, err
	}
	var inv Inventory
	before := make([]*unstructured.Unstructured, len(objs))
	for i, o := range objs {
		r := refOf(o)
		ri, err := c.resource(r)
		if err != nil {
			return res, err
		}
		b, err := ri.Get(ctx, r.Name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
			b = nil
		case err != nil:
			return res, fmt.Errorf("read %s: %w", r, err)
		}
		before[i] = b
		if b != nil && (prev.adopted(r) || (!prev.has(r) && b.GetLabels()[PartOfLabel] != PartOfValue)) {
			inv.Adopted = append(inv.Adopted, r)
		}
		inv.Objects = append(inv.Objects, r)
	}
	for _, r := range prev.Objects {
		if !inv.has(r) && !prev.adopted(r) {
			res.Stale = append(res.Stale, r)
		}
	}
	record := Inventory{Objects: append(append([]Ref(nil), inv.Objects...), res.Stale...), Adopted: inv.Adopted}
	apply := func(i int) error {
		o := objs[i]
		r := refOf(o)
		ri, err := c.resource(r)
		if err != nil {
			return err
		}
		after, err := c.applyOne(ctx, ri, o, opts)
		if err != nil {
			return fmt.Errorf("apply %s: %w", r, err)
		}
		if before[i] != nil && unchanged(before[i], after, opts.DryRun) {
			res.Unchanged = append(res.Unchanged, r)
		} else {
			res.Changed = append(res.Changed, r)
		}
		return nil
	}
	// The inventory's own namespace first (it cannot be written before),
	// then the inventory, then the rest.
	nsMissing := false
	for i, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == c.ns() {
			if err := apply(i); err != nil {
				return res, err
			}
			nsMissing = before[i] == nil
		}
	}
	if !opts.DryRun {
		if err := c.writeInventory(ctx, record, opts); err != nil {
			return res, err
		}
	}
	for i, o := range objs {
		if o.GetKind() == "Namespace" && o.GetName() == c.ns() {
			continue
		}
		if opts.DryRun && nsMissing && o.GetNamespace() != "" {
			// A dry run creates no namespace to validate these in.
			continue
		}
		if err := apply(i); err != nil {
			return res, err
		}
	}
	return res, nil
}

// Prune deletes stale objects (Apply's Stale) and drops them from the
// inventory. What Helm adopted since (the kata-remote RuntimeClass, by
// kata-deploy's chart) is Helm's: it is forgotten, not deleted, and
// returned as kept.
func (c Cluster) Prune(ctx context.Context, stale []Ref) (deleted, kept []Ref, err error) {
	if len(stale) == 0 {
		return nil, nil, nil
	}
	for _, r := range stale {
		if c.HelmOwned(ctx, r) {
			kept = append(kept, r)
		} else {
			deleted = append(deleted, r)
		}
	}
	if err := c.DeleteAll(ctx, deleted); err != nil {
		return nil, nil, fmt.Errorf("prune objects the new settings no longer render: %w", err)
	}
	inv, err := c.ReadInventory(ctx)
	if err != nil {
		return nil, nil, err
	}
	inv.Objects = slices.DeleteFunc(inv.Objects, func(r Ref) bool { return slices.Contains(stale, r) })
	return deleted, kept, c.writeInventory(ctx, inv, ApplyOptions{})
}

func (c Cluster) writeInventory(ctx context.Context, inv Inventory, opts ApplyOptions) error {
	invObj, err := inventoryObject(inv, c.ns())
	if err != nil {
		return err
	}
	ri, err := c.resource(refOf(invObj))
	if err != nil {
		return err
	}
	if _, err := c.applyOne(ctx, ri, invObj, opts); err != nil {
		return fmt.Errorf("record inventory %s/%s: %w", c.ns(), InventoryName, err)
	}
	return nil
}

func (c Cluster) applyOne(ctx context.Context, ri dynamic.ResourceInterface, o *unstructured.Unstructured, opts ApplyOptions) (*unstructured.Unstructured, error) {
	data, err := json.Marshal(o.Object)
	if err != nil {
		return nil, err
	}
	po := metav1.PatchOptions{
		FieldManager:    FieldManager,
		Force:           &opts.ForceConflicts,
		FieldValidation: "Strict",
	}
	if opts.DryRun {
		po.DryRun = []string{metav1.DryRunAll}
	}
	out, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, data, po)
	if apierrors.IsConflict(err) {
		return nil, fmt.Errorf("%w; another field manager set these fields to other values: rerun with --force-conflicts to take them over", err)
	}
	return out, err
}

// unchanged tells whether applying left the object as it was. A real
// apply that changes an object changes its resourceVersion; a server-side
// dry run never does (nothing is persisted), so there the result the API
// server would store is compared with the live object, without the
// fields every write bumps (resourceVersion, generation, managedFields'
// timestamps).
func unchanged(before, after *unstructured.Unstructured, dryRun bool) bool {
	if !dryRun {
		return before.GetResourceVersion() == after.GetResourceVersion()
	}
	strip := func(u *unstructured.Unstructured) map[string]any {
		c := u.DeepCopy()
		for _, f := range []string{"resourceVersion", "generation", "managedFields"} {
			unstructured.RemoveNestedField(c.Object, "metadata", f)
		}
		return c.Object
	}
	return equality.Semantic.DeepEqual(strip(before), strip(after))
}

func inventoryObject(inv Inventory, ns string) (*unstructured.Unstructured, error) {
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
			"namespace": ns,
			"labels":    map[string]any{PartOfLabel: PartOfValue},
		},
		"data": map[string]any{"objects": string(objects), "adopted": string(adopted)},
	}}
	return u, nil
}

// Release drops every field only the installer owns in an object it did
// not create: server-side apply of an empty configuration removes what the
// field manager set before (labels on an adopted namespace, say).
// Uninstall calls it on what install adopted.
func (c Cluster) Release(ctx context.Context, r Ref) error {
	ri, err := c.resource(r)
	if err != nil {
		return err
	}
	md := map[string]any{"name": r.Name}
	if r.Namespace != "" {
		md["namespace"] = r.Namespace
	}
	empty := &unstructured.Unstructured{Object: map[string]any{"apiVersion": r.APIVersion, "kind": r.Kind, "metadata": md}}
	_, err = c.applyOne(ctx, ri, empty, ApplyOptions{})
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
	ri, err := c.resource(Ref{APIVersion: "v1", Kind: "ConfigMap", Namespace: c.ns(), Name: InventoryName})
	if err != nil {
		return inv, err
	}
	u, err := ri.Get(ctx, InventoryName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return inv, nil
	}
	if err != nil {
		return inv, fmt.Errorf("read inventory %s/%s: %w", c.ns(), InventoryName, err)
	}
	data, _, _ := unstructured.NestedStringMap(u.Object, "data")
	if err := json.Unmarshal([]byte(data["objects"]), &inv.Objects); err != nil {
		return inv, fmt.Errorf("inventory %s/%s: objects: %w; delete it and re-run install to rebuild it", c.ns(), InventoryName, err)
	}
	if data["adopted"] != "" {
		if err := json.Unmarshal([]byte(data["adopted"]), &inv.Adopted); err != nil {
			return inv, fmt.Errorf("inventory %s/%s: adopted: %w; delete it and re-run install to rebuild it", c.ns(), InventoryName, err)
		}
	}
	return inv, nil
}

// DeleteAll deletes refs in reverse apply order and waits until they are
// gone (Prune, and uninstall).
func (c Cluster) DeleteAll(ctx context.Context, refs []Ref) error {
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

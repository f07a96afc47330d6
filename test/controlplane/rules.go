package controlplane

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// RulesReview asks the API server what user may do in namespace ns, as
// `kubectl auth can-i --list --as=USER -n NS` asks it: a
// SelfSubjectRulesReview sent while impersonating user. For a
// ServiceAccount's name (system:serviceaccount:NS:NAME) kube-apiserver adds
// the groups its token would carry (system:serviceaccounts, …:NS and
// system:authenticated), so the answer is the pod's. An incomplete answer
// (an authorizer that cannot list its rules) is an error: a test comparing
// it would compare part of the truth.
func (cp *ControlPlane) RulesReview(ctx context.Context, user, ns string) (authorizationv1.SubjectRulesReviewStatus, error) {
	cfg := cp.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return authorizationv1.SubjectRulesReviewStatus{}, err
	}
	review, err := cs.AuthorizationV1().SelfSubjectRulesReviews().Create(ctx, &authorizationv1.SelfSubjectRulesReview{
		Spec: authorizationv1.SelfSubjectRulesReviewSpec{Namespace: ns},
	}, metav1.CreateOptions{})
	if err != nil {
		return authorizationv1.SubjectRulesReviewStatus{}, fmt.Errorf("SelfSubjectRulesReview as %s in %s: %w", user, ns, err)
	}
	if review.Status.Incomplete {
		return review.Status, fmt.Errorf("SelfSubjectRulesReview as %s in %s is incomplete: %s", user, ns, review.Status.EvaluationError)
	}
	return review.Status, nil
}

// WaitForAccess waits until user may do each of attrs, asked as
// RulesReview asks (a SelfSubjectAccessReview while impersonating user), or
// gives up after 30 s. kube-apiserver's RBAC authorizer reads Roles,
// ClusterRoles and their bindings from an informer cache, so a rule just
// written is granted a moment later; a test that reviews rules right after
// writing them waits here for one permission of each binding first.
func (cp *ControlPlane) WaitForAccess(ctx context.Context, user string, attrs ...authorizationv1.ResourceAttributes) error {
	cfg := cp.Config()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	for _, a := range attrs {
		var last error
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
				Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &a},
			}, metav1.CreateOptions{})
			if err != nil {
				last = err
				return false, nil
			}
			return r.Status.Allowed, nil
		})
		if err != nil {
			return fmt.Errorf("%s may not %s %s %s in %q (last error: %v): %w", user, a.Verb, a.Resource, a.Name, a.Namespace, last, err)
		}
	}
	return nil
}

// WaitForBindings waits until every RoleBinding in ns and every
// ClusterRoleBinding that names ServiceAccount saNamespace/sa is in force
// (WaitForAccess on one permission of each bound role), so that a
// RulesReview of that ServiceAccount in ns right after an install sees all
// of it.
func (cp *ControlPlane) WaitForBindings(ctx context.Context, saNamespace, sa, ns string) error {
	cs, err := kubernetes.NewForConfig(cp.Config())
	if err != nil {
		return err
	}
	names := func(subjects []rbacv1.Subject) bool {
		return slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool {
			return s.Kind == rbacv1.ServiceAccountKind && s.Name == sa && s.Namespace == saNamespace
		})
	}
	type bound struct {
		ref rbacv1.RoleRef
		ns  string // where a Role lives and its grant applies; "" for a ClusterRoleBinding
	}
	var bindings []bound
	crbs, err := cs.RbacV1().ClusterRoleBindings().List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, b := range crbs.Items {
		if names(b.Subjects) {
			bindings = append(bindings, bound{ref: b.RoleRef})
		}
	}
	rbs, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	for _, b := range rbs.Items {
		if names(b.Subjects) {
			bindings = append(bindings, bound{ref: b.RoleRef, ns: ns})
		}
	}
	var attrs []authorizationv1.ResourceAttributes
	for _, b := range bindings {
		var rules []rbacv1.PolicyRule
		if b.ref.Kind == "Role" {
			r, err := cs.RbacV1().Roles(b.ns).Get(ctx, b.ref.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("role %s/%s: %w", b.ns, b.ref.Name, err)
			}
			rules = r.Rules
		} else {
			r, err := cs.RbacV1().ClusterRoles().Get(ctx, b.ref.Name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("ClusterRole %s: %w", b.ref.Name, err)
			}
			rules = r.Rules
		}
		for _, r := range rules {
			if len(r.Verbs) == 0 || len(r.APIGroups) == 0 || len(r.Resources) == 0 {
				continue // non-resource rules: a SelfSubjectAccessReview of a path is not needed here
			}
			a := authorizationv1.ResourceAttributes{Verb: r.Verbs[0], Group: r.APIGroups[0], Namespace: ns}
			a.Resource, a.Subresource, _ = strings.Cut(r.Resources[0], "/")
			if len(r.ResourceNames) > 0 {
				a.Name = r.ResourceNames[0]
			}
			attrs = append(attrs, a)
			break
		}
	}
	return cp.WaitForAccess(ctx, "system:serviceaccount:"+saNamespace+":"+sa, attrs...)
}

// CanIList prints a rules review in the table `kubectl auth can-i --list`
// prints (TestCanIListMatchesKubectl holds it against kubectl's own), so a
// test can compare an API server's answer with the table a document shows
// its readers.
// Columns: Resources (resource.group, a subresource after a slash),
// Non-Resource URLs, Resource Names, Verbs. As kubectl does, each resource
// rule is split into one per group, resource and name, those with the same
// group, resource and name are merged (verbs in the order the answer gives
// them), non-resource rules stay one per URL and verb (duplicates
// included), and the rows are sorted by the rule's String form, which
// begins with the verbs: rows are grouped by verb list, not by resource.
func CanIList(st authorizationv1.SubjectRulesReviewStatus) string {
	type key struct {
		group, resource, name string
		named                 bool
	}
	var order []key
	verbs := map[key][]string{}
	var rules []rbacv1.PolicyRule
	for _, r := range st.ResourceRules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					keys := []key{{group: g, resource: res}}
					if len(r.ResourceNames) > 0 {
						keys = keys[:0]
						for _, n := range r.ResourceNames {
							keys = append(keys, key{group: g, resource: res, name: n, named: true})
						}
					}
					for _, k := range keys {
						if _, seen := verbs[k]; !seen {
							order = append(order, k)
						}
						if !slices.Contains(verbs[k], v) {
							verbs[k] = append(verbs[k], v)
						}
					}
				}
			}
		}
	}
	for _, k := range order {
		r := rbacv1.PolicyRule{APIGroups: []string{k.group}, Resources: []string{k.resource}, Verbs: verbs[k]}
		if k.named {
			r.ResourceNames = []string{k.name}
		}
		rules = append(rules, r)
	}
	for _, r := range st.NonResourceRules {
		for _, u := range r.NonResourceURLs {
			for _, v := range r.Verbs {
				rules = append(rules, rbacv1.PolicyRule{NonResourceURLs: []string{u}, Verbs: []string{v}})
			}
		}
	}
	sort.SliceStable(rules, func(i, j int) bool { return rules[i].String() < rules[j].String() })

	var b strings.Builder
	w := tabwriter.NewWriter(&b, 6, 4, 3, ' ', 0)
	fmt.Fprint(w, "Resources\tNon-Resource URLs\tResource Names\tVerbs\n")
	for _, r := range rules {
		fmt.Fprintf(w, "%s\t%v\t%v\t%v\n", resourceColumn(r), r.NonResourceURLs, r.ResourceNames, r.Verbs)
	}
	w.Flush()
	return b.String()
}

// resourceColumn is "resource.group", with a subresource after the group
// ("pods.metrics.k8s.io/log"); core resources have no group suffix.
func resourceColumn(r rbacv1.PolicyRule) string {
	if len(r.Resources) == 0 {
		return ""
	}
	res, sub, hasSub := strings.Cut(r.Resources[0], "/")
	if len(r.APIGroups) > 0 && r.APIGroups[0] != "" {
		res += "." + r.APIGroups[0]
	}
	if hasSub {
		res += "/" + sub
	}
	return res
}

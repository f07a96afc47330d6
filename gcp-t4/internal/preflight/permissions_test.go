package preflight

import (
	"context"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"cloud.google.com/go/compute/apiv1/computepb"
	provider "github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/gcefake"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/podevent"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/util/cloudinit"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
)

// effectiveInsert is the instance an insert creates: the body, over the
// template's properties when it names one (a body field replaces the
// template's, as GCE documents for sourceInstanceTemplate).
func effectiveInsert(t *testing.T, c gcefake.Call, templates map[string]*computepb.InstanceProperties) (*computepb.Instance, bool) {
	t.Helper()
	body := &computepb.Instance{}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(c.Body, body); err != nil {
		t.Fatalf("insert body: %v", err)
	}
	q, _ := url.ParseQuery(c.RawQuery)
	ref := q.Get("sourceInstanceTemplate")
	if ref == "" {
		return body, false
	}
	props := templates[lastSegment(ref)]
	if props == nil {
		t.Fatalf("insert names template %s, which the test did not add", ref)
	}
	eff := templateInstance(props)
	if body.Disks != nil {
		eff.Disks = body.Disks
	}
	if body.NetworkInterfaces != nil {
		eff.NetworkInterfaces = body.NetworkInterfaces
	}
	if body.ServiceAccounts != nil {
		eff.ServiceAccounts = body.ServiceAccounts
	}
	if body.Metadata != nil {
		eff.Metadata = body.Metadata
	}
	if body.Labels != nil {
		eff.Labels = body.Labels
	}
	if body.Tags != nil {
		eff.Tags = body.Tags
	}
	return eff, true
}

// TestRoleIsExactlyWhatTheProviderCalls runs the provider through its whole
// life (verify, create with and without a pod image, list, delete) on
// gcefake for each configuration that changes its calls, maps every
// recorded call to the permission Google documents for it, and requires
// the custom role preflight proposes to be exactly that set: nothing
// missing (a create would fail), nothing more (least privilege).
func TestRoleIsExactlyWhatTheProviderCalls(t *testing.T) {
	tmplProps := func(sa string) *computepb.InstanceProperties {
		p := &computepb.InstanceProperties{
			MachineType:       proto.String("n1-standard-4"),
			GuestAccelerators: []*computepb.AcceleratorConfig{{AcceleratorType: proto.String("nvidia-tesla-t4"), AcceleratorCount: proto.Int32(1)}},
			Scheduling:        &computepb.Scheduling{OnHostMaintenance: proto.String("TERMINATE"), AutomaticRestart: proto.Bool(false)},
			Disks: []*computepb.AttachedDisk{{Boot: proto.Bool(true), AutoDelete: proto.Bool(true),
				InitializeParams: &computepb.AttachedDiskInitializeParams{SourceImage: proto.String("projects/demo-project/global/images/podvm-t4"), DiskSizeGb: proto.Int64(50)}}},
			NetworkInterfaces: []*computepb.NetworkInterface{{Network: proto.String("global/networks/default"), Subnetwork: proto.String("regions/us-central1/subnetworks/default")}},
		}
		if sa != "" {
			p.ServiceAccounts = []*computepb.ServiceAccount{{Email: proto.String(sa), Scopes: []string{"https://www.googleapis.com/auth/cloud-platform"}}}
		}
		return p
	}
	const sa = "podvm@demo-project.iam.gserviceaccount.com"
	for _, c := range []struct {
		name   string
		mutate func(*gcpt4.Config)
		tmpl   *computepb.InstanceProperties
		region string
	}{
		{name: "image and subnetwork"},
		{name: "image family, network only", mutate: func(c *gcpt4.Config) {
			c.ImageName, c.Subnetwork = "projects/demo-project/global/images/family/podvm-t4", ""
		}},
		{name: "service account", mutate: func(c *gcpt4.Config) { c.ServiceAccount = sa }},
		{name: "zones auto", mutate: func(c *gcpt4.Config) { c.FallbackZones = []string{setting.ZonesAuto} }},
		{name: "no network tags", mutate: func(c *gcpt4.Config) { c.NetworkTags = nil }},
		{name: "cache image family", mutate: func(c *gcpt4.Config) {
			c.CacheImage = "projects/demo-project/global/images/family/podvm-t4"
			c.CacheVerity = "root=" + strings.Repeat("0f", 32) + ",offset=10468982784"
		}},
		{name: "global template", tmpl: tmplProps(sa)},
		{name: "regional template", tmpl: tmplProps(""), region: "us-central1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			fake := gcefake.New()
			t.Cleanup(fake.Close)
			// GCE's operations take seconds; the provider then waits on them.
			fake.SetOperationLatency(20 * time.Millisecond)
			// Inserts may attach only a service account that exists.
			fake.AddServiceAccount(sa)
			cfg := baseConfig(fake)
			// The second create names an image by annotation, which the
			// admin must allow (GCP_ALLOWED_IMAGES).
			cfg.AllowedImages = []string{"projects/demo-project/global/images/podvm-t4"}
			templates := map[string]*computepb.InstanceProperties{}
			if c.tmpl != nil {
				fake.AddInstanceTemplate(c.region, &computepb.InstanceTemplate{Name: proto.String("t4"), Properties: c.tmpl})
				templates["t4"] = c.tmpl
				cfg.ImageName, cfg.Network, cfg.Subnetwork = "", "", ""
				cfg.InstanceTemplate = "t4"
				if c.region != "" {
					cfg.InstanceTemplate = "regions/" + c.region + "/instanceTemplates/t4"
				}
			}
			if c.mutate != nil {
				c.mutate(&cfg)
			}
			ctx := context.Background()
			// Started as CAA starts it, with a cluster to tell pods their
			// podVMs' start-up: it then reads podVM consoles too.
			p, await := startAsCAA(t, cfg)
			defer p.Teardown()
			if err := p.ConfigVerifier(); err != nil {
				t.Fatal(err)
			}
			// The pod is named in apf.json, as CAA writes it: its Events need it.
			cc := &cloudinit.CloudConfig{WriteFiles: []cloudinit.WriteFile{{Path: "/run/peerpod/apf.json", Content: `{"pod-name":"llm","pod-namespace":"ml"}`}}}
			var ids []string
			for i, spec := range []provider.InstanceTypeSpec{
				{GPUs: 1, VCPUs: 2, Memory: 8192},
				{GPUs: 1, VCPUs: 2, Memory: 8192, Image: "projects/demo-project/global/images/podvm-t4"},
			} {
				inst, err := p.CreateInstance(ctx, "llm", strings.Repeat(string(rune('a'+i)), 64), cc, spec)
				if err != nil {
					t.Fatalf("create %d: %v", i, err)
				}
				ids = append(ids, inst.ID)
			}
			if _, err := p.ListManaged(ctx); err != nil {
				t.Fatal(err)
			}
			// Both sandboxes ran; then GCE stops the first podVM (a host
			// error), so its delete reads what ended it for its pod.
			await(podevent.ReasonReachable, len(ids))
			parts := strings.Split(ids[0], "/") // zones/Z/instances/N
			if err := fake.Interrupt(parts[1], parts[3], gcefake.HostError); err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if err := p.DeleteInstance(ctx, id); err != nil {
					t.Fatal(err)
				}
			}
			need := map[string]bool{}
			for _, call := range fake.Calls() {
				perm, ok := methodPermissions[call.Kind]
				if !ok {
					t.Fatalf("the provider calls %s %s (%s), which methodPermissions does not map to a permission", call.Method, call.Path, call.Kind)
				}
				need[perm] = true
				if call.Kind == "instances.insert" {
					eff, templated := effectiveInsert(t, call, templates)
					for _, p := range insertPermissions(eff, templated) {
						need[p] = true
					}
				}
			}
			var got []string
			for p := range need {
				got = append(got, p)
			}
			sort.Strings(got)
			role := ProviderPermissions(cfg, c.tmpl)
			if !slices.Equal(got, role) {
				t.Errorf("role %v\ncalls need %v", role, got)
			}
			if slices.Contains(role, actAs) {
				t.Error("the project role holds iam.serviceAccounts.actAs; it belongs on the podVM service account")
			}
		})
	}
}

// TestPermissionFixIsLeastPrivilege: the fix is the custom role with the
// podvm- condition and actAs on the podVM account only, never the broad
// predefined roles.
func TestPermissionFixIsLeastPrivilege(t *testing.T) {
	fake := readyProject(t)
	cfg := baseConfig(fake)
	cfg.ServiceAccount = "podvm@demo-project.iam.gserviceaccount.com"
	fake.AddServiceAccount(cfg.ServiceAccount)
	fake.RevokePermissions("compute.instances.setMetadata")
	cfg.Credentials = caaKey()
	rs := Run(ctx(t), Options{Cfg: cfg, Member: "serviceAccount:caa@demo-project.iam.gserviceaccount.com"}, quiet())
	r, _ := find(rs, "permissions")
	for _, want := range []string{"gcloud iam roles create caaGcpT4 --project=demo-project", "compute.instances.setMetadata", "--role=projects/demo-project/roles/caaGcpT4",
		`resource.name.extract("/instances/{name}").startsWith("podvm-")`, "--member=serviceAccount:caa@demo-project.iam.gserviceaccount.com"} {
		if !strings.Contains(r.Fix, want) {
			t.Errorf("permissions fix lacks %q:\n%s", want, r.Fix)
		}
	}
	for _, r := range rs {
		for _, broad := range []string{"roles/compute.instanceAdmin", "roles/editor", "add-iam-policy-binding demo-project --member=serviceAccount:caa@demo-project.iam.gserviceaccount.com --role=roles/iam.serviceAccountUser"} {
			if strings.Contains(r.Fix, broad) {
				t.Errorf("%s: fix grants %s:\n%s", r.Check, broad, r.Fix)
			}
		}
	}
	a, _ := find(rs, "actAs")
	if !strings.Contains(a.Fix, "gcloud iam service-accounts add-iam-policy-binding podvm@demo-project.iam.gserviceaccount.com") {
		t.Errorf("actAs fix %q: want a binding on the podVM account", a.Fix)
	}
	// The role the fix creates reads podVM consoles (start-up Events, a
	// failed podVM's last lines), under the same podvm- condition.
	if perms := createdRolePermissions(t, r.Fix, RoleID); !slices.Contains(perms, "compute.instances.getSerialPortOutput") {
		t.Errorf("gcloud iam roles create %s grants %v: want compute.instances.getSerialPortOutput", RoleID, perms)
	}
}

// createdRolePermissions is the --permissions list of the `gcloud iam roles
// create ROLE` command in fix.
func createdRolePermissions(t *testing.T, fix, role string) []string {
	t.Helper()
	_, cmd, ok := strings.Cut(fix, "gcloud iam roles create "+role+" ")
	if !ok {
		t.Fatalf("fix has no `gcloud iam roles create %s`:\n%s", role, fix)
	}
	cmd, _, _ = strings.Cut(cmd, " && ")
	for _, arg := range strings.Fields(cmd) {
		if list, ok := strings.CutPrefix(arg, "--permissions="); ok {
			return strings.Split(list, ",")
		}
	}
	t.Fatalf("`gcloud iam roles create %s` has no --permissions:\n%s", role, fix)
	return nil
}

// roleConfigs are the configurations whose calls differ (as
// TestRoleIsExactlyWhatTheProviderCalls runs them), with the template's
// properties where one is used.
func roleConfigs(fake *gcefake.Server) map[string]struct {
	cfg  gcpt4.Config
	tmpl *computepb.InstanceProperties
} {
	type c = struct {
		cfg  gcpt4.Config
		tmpl *computepb.InstanceProperties
	}
	out := map[string]c{}
	with := func(name string, f func(*gcpt4.Config), tmpl *computepb.InstanceProperties) {
		cfg := baseConfig(fake)
		if f != nil {
			f(&cfg)
		}
		out[name] = c{cfg, tmpl}
	}
	with("image and subnetwork", nil, nil)
	with("image family, network only", func(c *gcpt4.Config) {
		c.ImageName, c.Subnetwork = "projects/demo-project/global/images/family/podvm-t4", ""
	}, nil)
	with("service account", func(c *gcpt4.Config) { c.ServiceAccount = "podvm@demo-project.iam.gserviceaccount.com" }, nil)
	with("zones auto", func(c *gcpt4.Config) { c.FallbackZones = []string{setting.ZonesAuto} }, nil)
	with("no network tags", func(c *gcpt4.Config) { c.NetworkTags = nil }, nil)
	with("template", func(c *gcpt4.Config) { c.ImageName, c.Network, c.Subnetwork, c.InstanceTemplate = "", "", "", "t4" },
		&computepb.InstanceProperties{NetworkInterfaces: []*computepb.NetworkInterface{{Subnetwork: proto.String("regions/us-central1/subnetworks/default")}}})
	return out
}

// TestRoleReadsPodVMConsoles: every configuration's role holds
// compute.instances.getSerialPortOutput, the permission Compute Engine
// checks for instances.getSerialPortOutput (the provider reads gpu-init's
// readiness line and failure lines from a starting podVM's console, and a
// failed podVM's last lines before deleting it); the reaper, which only
// lists and deletes, does not get it.
func TestRoleReadsPodVMConsoles(t *testing.T) {
	const perm = "compute.instances.getSerialPortOutput"
	if got := methodPermissions["instances.getSerialPortOutput"]; got != perm {
		t.Errorf("methodPermissions maps instances.getSerialPortOutput to %q, want %s", got, perm)
	}
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	for name, c := range roleConfigs(fake) {
		if role := ProviderPermissions(c.cfg, c.tmpl); !slices.Contains(role, perm) {
			t.Errorf("%s: role %v lacks %s", name, role, perm)
		}
	}
	if slices.Contains(ReaperPermissions, perm) || strings.Contains(ReaperRoleFix("p", ""), perm) {
		t.Errorf("the reaper's role %v reads consoles; it only lists and deletes", ReaperPermissions)
	}
}

// TestDocsListTheRolesPermissions: docs/preflight.md's `permissions
// serviceAccount:CAA` row names every permission the role holds in every
// configuration (short forms: instances.X as X, compute. dropped; a/b/c
// lists alternatives), and
// docs/install.md says why the role reads consoles.
func TestDocsListTheRolesPermissions(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "preflight.md"))
	if err != nil {
		t.Fatal(err)
	}
	// The row's list: "(`ProviderPermissions`: create, get, …; depending
	// on the settings disks.create and images.get/getFromFamily/…)".
	var listed []string
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, "| `permissions serviceAccount:CAA` | "); ok {
			if _, list, ok := strings.Cut(rest, "(`ProviderPermissions`: "); ok {
				list, _, _ = strings.Cut(list, " | ")
				listed = regexp.MustCompile(`[A-Za-z.]+`).FindAllString(list, -1)
			}
		}
	}
	if len(listed) == 0 {
		t.Fatal("docs/preflight.md has no `permissions serviceAccount:CAA` row listing (`ProviderPermissions`: …)")
	}
	fake := gcefake.New()
	t.Cleanup(fake.Close)
	common := map[string]int{}
	configs := roleConfigs(fake)
	for _, c := range configs {
		for _, p := range ProviderPermissions(c.cfg, c.tmpl) {
			common[p]++
		}
	}
	for p, n := range common {
		if n != len(configs) {
			continue
		}
		short := strings.TrimPrefix(strings.TrimPrefix(p, "compute."), "instances.")
		if !slices.Contains(listed, short) {
			t.Errorf("docs/preflight.md's permissions row lists %v, not %s (%s, held in every configuration)", listed, short, p)
		}
	}
	install, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(install), "`compute.instances.getSerialPortOutput`") {
		t.Error("docs/install.md does not say why the role holds compute.instances.getSerialPortOutput")
	}
}

// startAsCAA starts the provider as CAA's Manager does, with a stand-in
// for the cluster's API that answers what the provider asks of it: the
// kube-system namespace (the cluster ID check), Events (accepted) and
// pods (gone, which ends a podVM's boot watch). The API server itself is
// exercised in internal/gc's start-up scenario; this test is about the
// calls the provider makes to GCE.
func startAsCAA(t *testing.T, cfg gcpt4.Config) (*gcpt4.Provider, func(reason string, n int)) {
	t.Helper()
	var mu sync.Mutex
	posted := map[string]int{}
	api := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kube-system":
			fmt.Fprintf(w, `{"metadata":{"name":"kube-system","uid":%q}}`, cfg.ClusterID)
		case r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/pods/"):
			// Every pod's sandbox is ready: CAA reached its agent.
			fmt.Fprint(w, `{"metadata":{"uid":"u"},"status":{"phase":"Running","conditions":[{"type":"PodReadyToStartContainers","status":"True"}]}}`)
		case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/events"):
			var ev struct{ Reason string }
			_ = json.NewDecoder(r.Body).Decode(&ev)
			mu.Lock()
			posted[ev.Reason]++
			mu.Unlock()
			w.WriteHeader(http.StatusCreated)
			fmt.Fprint(w, `{}`)
		default:
			http.Error(w, `{"message":"not found"}`, http.StatusNotFound)
		}
	}))
	t.Cleanup(api.Close)
	var m gcpt4.Manager
	m.ParseCmd(flag.NewFlagSet("cloud-api-adaptor", flag.ContinueOnError))
	*m.GetConfig() = cfg
	cluster := gcpt4.ClusterAPI{URL: api.URL, Token: "t", CAPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: api.Certificate().Raw})}
	p, err := m.Start(context.Background(), func() (gcpt4.ClusterAPI, error) { return cluster, nil })
	if err != nil {
		t.Fatal(err)
	}
	// await waits for n Events of a reason; the deadline is a hang guard.
	await := func(reason string, n int) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(5 * time.Millisecond) {
			mu.Lock()
			got := posted[reason]
			mu.Unlock()
			if got >= n {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d %s Events, want %d", got, reason, n)
			}
		}
	}
	return p, await
}

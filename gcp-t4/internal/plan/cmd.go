package plan

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/annotations"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/caa-gcp-t4/gcp-t4/internal/cli"
	"github.com/caa-gcp-t4/gcp-t4/internal/fit"
	"github.com/caa-gcp-t4/gcp-t4/internal/prices"
	"github.com/caa-gcp-t4/gcp-t4/internal/providerflags"
	"github.com/caa-gcp-t4/gcp-t4/internal/startup"
)

// Stand-ins for required provider settings, so that plan runs without a
// cloud account or configuration; each use is reported in a note.
var placeholders = []struct {
	env, value string
	field      func(*gcpt4.Config) *string
}{
	{"GCP_PROJECT_ID", "example-project", func(c *gcpt4.Config) *string { return &c.ProjectID }},
	{"GCP_ZONE", "us-central1-a", func(c *gcpt4.Config) *string { return &c.Zone }},
	{"PODVM_IMAGE_NAME", "podvm-t4", func(c *gcpt4.Config) *string { return &c.ImageName }},
	{"GCP_NETWORK", "global/networks/default", func(c *gcpt4.Config) *string { return &c.Network }},
}

// Main is `gcp-t4 plan`. It takes the provider's flags (and env), a
// manifest (-f) or a bare request (-gpus, -vcpus, -memory,
// -machine-type), and prints the podVMs that would be created.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer, logger *slog.Logger) int {
	// Sub-modes (`gcp-t4 plan serve …`) are a first word that is not a
	// flag; each gets a case here and reuses ParseManifests and Planner.
	if len(args) > 0 && args[0] == "serve" {
		return fit.Main(ctx, args[1:], stdout, stderr, logger)
	}
	if err := run(ctx, args, stdout, stderr); err != nil {
		var code cli.ExitStatus
		if errors.As(err, &code) {
			return int(code)
		}
		fmt.Fprintf(stderr, "gcp-t4 plan: %v\n", err)
		return 1
	}
	return 0
}

// requestFlags are the flags that describe a workload; plan with none of
// them has nothing to plan.
var requestFlags = []string{"f", "k", "gpus", "vcpus", "memory", "machine-type"}

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gcp-t4 plan", flag.ContinueOnError)
	fs.SetOutput(stderr)
	pf := providerflags.Register(fs)
	file := fs.String("f", "", "manifest: a Pod, Deployment, StatefulSet, Job, CronJob, RayService, RayCluster or RayJob (YAML or JSON, several documents allowed; - for stdin); an object without metadata.namespace is planned in default, and plan says so")
	kdir := fs.String("k", "", "a kustomize directory, rendered as kubectl apply -k renders it, so namespaces and names are the kustomization's")
	allNotes := fs.Bool("notes", false, "also print the notes true of every plan (no API called, the boot disk, profiles without an image) and the price table's sources")
	output := fs.String("o", OutputTable, "output: table, json, or request (the exact instances.insert request per pod group, protojson)")
	runtimeClass := fs.String("runtime-class", DefaultRuntimeClass, "the runtime class the peer-pods webhook acts on (its TARGET_RUNTIMECLASS)")
	gpus := fs.Int64("gpus", 0, "without -f or -k: nvidia.com/gpu the pod requests")
	vcpus := fs.String("vcpus", "", "without -f or -k: CPU the pod requests, e.g. 2 or 1500m")
	memory := fs.String("memory", "", "without -f or -k: memory the pod requests, e.g. 8Gi")
	machineType := fs.String("machine-type", "", "without -f or -k: the pod's machine_type annotation (a profile or machine type)")
	cat, err := startup.Load()
	if err != nil {
		return err
	}
	sf := registerStartup(fs, cat)
	fs.Usage = usage(fs, sf)
	if code, ok := cli.Parse(fs, args, stdout, stderr); !ok {
		return cli.ExitStatus(code)
	}
	if fs.NArg() > 0 {
		if args[0] == fs.Arg(0) {
			return cli.ExitStatus(cli.Misuse(fs, stderr, "unknown command %q: the one command is serve; give a workload with -f MANIFEST", fs.Arg(0)))
		}
		return cli.ExitStatus(cli.Misuse(fs, stderr, "unexpected argument %q: give the manifest with -f", fs.Arg(0)))
	}
	if *output != OutputTable && *output != OutputJSON && *output != OutputRequest {
		return cli.ExitStatus(cli.Misuse(fs, stderr, "-o %q: use table, json or request", *output))
	}
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || slices.Contains(requestFlags, f.Name) })
	if !given {
		return cli.ExitStatus(cli.Misuse(fs, stderr, "nothing to plan: give a manifest (-f FILE, - for stdin), a kustomization (-k DIR) or the pod's requests (-gpus N, -vcpus N, -memory Q)"))
	}
	if err := sf.noteSet(fs); err != nil {
		return err
	}
	cfg := pf.Config()
	notes := Notes{All: *allNotes}
	var stand []string
	for _, p := range placeholders {
		if f := p.field(&cfg); *f == "" {
			*f = p.value
			stand = append(stand, p.env+"="+p.value)
		}
	}
	if len(stand) > 0 {
		notes.Plan = append(notes.Plan, "not set, so planned with stand-ins: "+strings.Join(stand, ", "))
	}
	if cfg.Endpoint == "" && cfg.Credentials == "" {
		notes.Every = append(notes.Every, "no API was called: profiles, zones and the insert come from the provider's code and settings alone")
	}
	if len(cfg.FallbackZones) == 1 && cfg.FallbackZones[0] == setting.ZonesAuto {
		notes.Plan = append(notes.Plan, "GCP_ZONES=auto: the fallback zones are discovered at run time (the region's zones offering the accelerator)")
	}
	notes.Every = append(notes.Every, "the boot disk is ROOT_VOLUME_SIZE GiB, or the image's size when larger; user-data is a placeholder for CAA's per-pod cloud-config")
	profiles, err := catalog.New(cfg.ProfilesFile, cfg.Profiles)
	if err != nil {
		return err
	}
	// A confidential profile without an image of its own is refused at
	// create time; plan shows it with a stand-in image and says so: in
	// the plan's notes when a pod gets that profile, else among the notes
	// true of every plan.
	noImage := map[string]string{}
	for _, p := range profiles.Profiles() {
		if p.ConfidentialType != "" && p.Image == "" && cfg.ProfileImages[p.Name] == "" {
			if cfg.ProfileImages == nil {
				cfg.ProfileImages = map[string]string{}
			}
			// Lowercase: GCE image names are, and the provider parses it as one.
			stand := "required-" + strings.ToLower(p.ConfidentialType) + "-image-for-" + p.Name
			cfg.ProfileImages[p.Name] = stand
			noImage[p.Name] = fmt.Sprintf("profile %s has no image (GCP_PROFILE_IMAGES=%s=IMAGE, or image: in the profile); planned with %s, and the provider refuses pods naming it until one is set: the T4 podVM image is not a %s image", p.Name, p.Name, stand, p.ConfidentialType)
		}
	}
	tab, err := prices.Load()
	if err != nil {
		return err
	}

	var workloads []Workload
	if *file != "" || *kdir != "" {
		if *file != "" && *kdir != "" {
			return cli.ExitStatus(cli.Misuse(fs, stderr, "-f and -k are exclusive: give the manifest or the kustomize directory"))
		}
		if *gpus != 0 || *vcpus != "" || *memory != "" || *machineType != "" {
			return cli.ExitStatus(cli.Misuse(fs, stderr, "-f/-k and -gpus/-vcpus/-memory/-machine-type are exclusive: the manifest carries the requests"))
		}
		var skipped []string
		if *kdir != "" {
			workloads, skipped, err = readKustomization(*kdir)
		} else {
			workloads, skipped, err = readManifest(*file)
		}
		if err != nil {
			return err
		}
		for _, s := range skipped {
			notes.Plan = append(notes.Plan, "skipped "+s+": it makes no pods")
		}
		if n := assumedNamespace(workloads); n != "" {
			notes.Plan = append(notes.Plan, n)
		}
	} else {
		w, err := flagWorkload(*gpus, *vcpus, *memory, *machineType, *runtimeClass)
		if err != nil {
			return err
		}
		workloads = []Workload{w}
	}
	pl := &Planner{Config: cfg, Catalog: profiles, Prices: tab, RuntimeClass: *runtimeClass}
	var entries []Entry
	var starts []GroupStart
	for _, w := range workloads {
		es, err := pl.Plan(w)
		if err != nil {
			return err
		}
		entries = append(entries, es...)
		for _, e := range es {
			if n, ok := noImage[e.Profile]; ok {
				notes.Plan = append(notes.Plan, n)
				delete(noImage, e.Profile)
			}
		}
		// A start is modelled for each group that gets a podVM.
		for _, g := range w.Groups {
			i := slices.IndexFunc(es, func(e Entry) bool { return e.Group == g.Name })
			if i < 0 {
				continue
			}
			gs, err := sf.startOf(w, g, es[i])
			if err != nil {
				return err
			}
			starts = append(starts, gs)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(noImage)) {
		notes.Every = append(notes.Every, noImage[name])
	}
	if err := Render(stdout, *output, entries, notes, tab, starts); err != nil {
		return err
	}
	met := true
	see := "NOT MET above"
	switch *output {
	case OutputTable:
		if met, err = renderStarts(stdout, starts, cat); err != nil {
			return err
		}
	case OutputJSON:
		met, see = allMet(starts), "the deadlines with met false and their fix"
	}
	if !met {
		// Printed after "gcp-t4 plan: ", it fits 100 columns on two lines.
		return fmt.Errorf("start-up does not fit every deadline on its path: see %s;\n  give the cluster's settings with their flags where they differ from the defaults", see)
	}
	return nil
}

func readManifest(path string) ([]Workload, []string, error) {
	if path == "-" {
		w, s, err := ParseManifests(os.Stdin)
		if err != nil {
			return nil, nil, fmt.Errorf("stdin: %w", err)
		}
		return w, s, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, fmt.Errorf("-f: %w", err)
	}
	defer f.Close()
	w, s, err := ParseManifests(f)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	return w, s, nil
}

// usage is plan's -h: its own flags in full, the start-up table's flags
// and the provider's settings by name (each start-up row names its flag,
// figure and source; docs/provider.md describes the settings).
func usage(fs *flag.FlagSet, sf *startupFlags) func() {
	return providerflags.Help{
		Synopsis: "gcp-t4 plan -f MANIFEST | -k DIR | -gpus N [-vcpus N] [-memory Q] [flags]\n       gcp-t4 plan serve [flags]",
		About: []string{"Shows the podVM each pod of a workload would get: profile, machine type, T4s, zones, provisioning model, " +
			"the exact instances.insert request (-o request) and its hourly cost, then its start-up phase by phase against every " +
			"deadline on the path. No cloud account: nothing is called. Exits 1 when a deadline is not met. docs/preflight.md"},
		Commands: [][2]string{{"serve", "size a model served with vLLM over T4s: memory per GPU, KV cache, decode speed (gcp-t4 plan serve -h)"}},
		Groups:   []providerflags.FlagGroup{{Heading: "start-up figures and the cluster's deadlines (the start-up table names each row's flag and source)", Flags: sf.names}},
	}.Usage(fs)
}

// assumedNamespace is the note for the workloads that name no namespace:
// they are planned in default, which labels their podVMs caa-namespace=default,
// while kubectl apply -n or a kustomization's namespace: would put them
// elsewhere.
func assumedNamespace(ws []Workload) string {
	var names []string
	for _, w := range ws {
		if w.NamespaceAssumed {
			names = append(names, w.Kind+"/"+w.Name)
		}
	}
	if len(names) == 0 {
		return ""
	}
	return fmt.Sprintf("no metadata.namespace in %s: planned in namespace %s (caa-namespace=%s); where kubectl apply -n or a kustomization sets another, give it in the manifest or plan the kustomization with -k DIR",
		strings.Join(names, ", "), defaultNamespace, defaultNamespace)
}

// flagWorkload is the one-container pod the request flags describe.
func flagWorkload(gpus int64, vcpus, memory, machineType, runtimeClass string) (Workload, error) {
	if gpus < 0 {
		return Workload{}, fmt.Errorf("-gpus %d: want 0 or more", gpus)
	}
	res := corev1.ResourceList{}
	for flagName, v := range map[string]string{"vcpus": vcpus, "memory": memory} {
		if v == "" {
			continue
		}
		q, err := resource.ParseQuantity(v)
		if err != nil {
			return Workload{}, fmt.Errorf("-%s %q: %v (e.g. 2, 1500m, 8Gi)", flagName, v, err)
		}
		name := corev1.ResourceCPU
		if flagName == "memory" {
			name = corev1.ResourceMemory
		}
		res[name] = q
	}
	if gpus > 0 {
		res[GPUResource] = resource.MustParse(strconv.FormatInt(gpus, 10))
	}
	g := Group{Name: "pod", Replicas: 1, Annotations: map[string]string{}}
	g.Spec.RuntimeClassName = &runtimeClass
	g.Spec.Containers = []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: res, Limits: res}}}
	if machineType != "" {
		g.Annotations[annotations.MachineType] = machineType
	}
	return Workload{Kind: "Pod", Name: "pod", Namespace: "default", Groups: []Group{g}}, nil
}

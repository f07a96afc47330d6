package install

import (
	"bytes"
	"compress/gzip"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/caa-gcp-t4/gcp-t4/internal/gc"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/catalog"
	"github.com/confidential-containers/cloud-api-adaptor/src/cloud-providers/gcpt4/setting"
	toml "github.com/pelletier/go-toml/v2"
)

// CAACommit is the upstream commit the key table below was read from:
// cloud-api-adaptor v0.22.0.
const CAACommit = "38d0fcf7c7b787cc7fb9831410a910b37bb3be09"

// caaKey is one variable cloud-api-adaptor itself (not the provider) reads.
type caaKey struct {
	Env, Flag, Kind, Default, Usage string
	// check refuses a value CAA would reject or silently misread; nil
	// accepts any string.
	check func(string) error
}

// caaKeys are the variables CAA v0.22.0 reads for every provider: the
// reg.XxxWithEnv calls in src/cloud-api-adaptor/cmd/cloud-api-adaptor/main.go
// (defaults from pkg/adaptor/server.go, pkg/adaptor/proxy/proxy.go,
// pkg/forwarder/forwarder.go, pkg/podnetwork/workernode.go and
// pkg/podnetwork/tunneler/vxlan/workernode.go), plus CLOUD_PROVIDER, which
// entrypoint.sh dispatches on. The peerpods chart at the same commit
// (install/charts/peerpods) writes no other key into peer-pods-cm than its
// providerConfigs and tlsProfile (TLS_MIN_VERSION, TLS_CIPHER_SUITES);
// entrypoint.sh's ENABLE_CLOUD_PROVIDER_EXTERNAL_PLUGIN and
// CRI_RUNTIME_ENDPOINT are assigned there and never used, and
// install/yamls is gone from that release (Helm only since v0.19). Flags
// without an env variable (-disable-tls, -host-interface, -vxlan-min-id)
// cannot be set through peer-pods-cm.
var caaKeys = []caaKey{
	{Env: "CLOUD_PROVIDER", Kind: setting.KindString, Usage: "provider entrypoint.sh starts; gcp-t4 here", check: func(v string) error {
		if v != gcpt4.ProviderName {
			return fmt.Errorf("%q: this installer deploys the %s provider only; drop the setting", v, gcpt4.ProviderName)
		}
		return nil
	}},
	{Env: "REMOTE_HYPERVISOR_ENDPOINT", Flag: "socket", Kind: setting.KindString, Default: "/run/peerpod/hypervisor.sock", Usage: "Unix socket of the remote hypervisor service (kata's remote_hypervisor_socket)", check: underRunPeerpod},
	{Env: "PODS_DIR", Flag: "pods-dir", Kind: setting.KindString, Default: "/run/peerpod/pods", Usage: "base directory for pod directories", check: underRunPeerpod},
	{Env: "PAUSE_IMAGE", Flag: "pause-image", Kind: setting.KindString, Usage: "pause image to be used for the pods"},
	{Env: "FORWARDER_PORT", Flag: "forwarder-port", Kind: setting.KindString, Default: "15150", Usage: "port of the podVM's agent-protocol-forwarder", check: port},
	{Env: "CACERT_FILE", Flag: "ca-cert-file", Kind: setting.KindString, Usage: "CA certificate file for CAA-to-podVM TLS (" + tlsDir + "/" + tlsCAKey + ")"},
	{Env: "CERT_FILE", Flag: "cert-file", Kind: setting.KindString, Usage: "client certificate file for CAA-to-podVM TLS (" + tlsDir + "/" + tlsCertKey + ")"},
	{Env: "CERT_KEY", Flag: "cert-key", Kind: setting.KindString, Usage: "client key file for CAA-to-podVM TLS (" + tlsDir + "/" + tlsKeyKey + ")"},
	{Env: "TLS_SKIP_VERIFY", Flag: "tls-skip-verify", Kind: setting.KindBool, Default: "false", Usage: "refused when true: CAA would accept any certificate from whatever answers on a podVM's address", check: noSkipVerify},
	{Env: "TLS_MIN_VERSION", Flag: "tls-min-version", Kind: setting.KindString, Usage: "VersionTLS12 or VersionTLS13", check: tlsVersion},
	{Env: "TLS_CIPHER_SUITES", Flag: "tls-cipher-suites", Kind: setting.KindString, Usage: "comma-separated IANA cipher suite names (not with VersionTLS13)", check: cipherSuites},
	{Env: "PROXY_TIMEOUT", Flag: "proxy-timeout", Kind: setting.KindDuration, Default: "5m0s", Usage: "how long CAA waits for the podVM's forwarder", check: positiveDuration},
	{Env: "TUNNEL_TYPE", Flag: "tunnel-type", Kind: setting.KindString, Default: "vxlan", Usage: "pod network tunnel", check: func(v string) error {
		if v != "vxlan" {
			return fmt.Errorf("%q: podVMs on GCE use vxlan (the only tunnel CAA v0.22.0 registers, pkg/podnetwork/common.go)", v)
		}
		return nil
	}},
	{Env: "VXLAN_PORT", Flag: "vxlan-port", Kind: setting.KindInt, Default: "4789", Usage: "VXLAN UDP port", check: port},
	{Env: "INITDATA", Flag: "initdata", Kind: setting.KindString, Usage: "default initdata for all pods: base64 of gzip of the initdata TOML", check: initdata},
	{Env: "CLOUD_CONFIG_VERIFY", Flag: "cloud-config-verify", Kind: setting.KindBool, Default: "false", Usage: "run the provider's ConfigVerifier at start (the overlay sets true)", check: boolean},
	{Env: "PEERPODS_LIMIT_PER_NODE", Flag: "peerpods-limit-per-node", Kind: setting.KindInt, Default: "10", Usage: "peer pods per node (kata.peerpods.io/vm capacity)", check: nonNegativeInt},
	{Env: "ENABLE_SCRATCH_SPACE", Flag: "enable-scratch-space", Kind: setting.KindBool, Default: "false", Usage: "encrypted scratch space for podVMs", check: scratchSpace},
	{Env: "EXTERNAL_NETWORK_VIA_PODVM", Flag: "ext-network-via-podvm", Kind: setting.KindBool, Default: "false", Usage: "[experimental] external networking via the podVM", check: boolean},
	{Env: "POD_SUBNET_CIDRS", Flag: "pod-subnet-cidrs", Kind: setting.KindCustom, Usage: "[experimental] comma-separated pod subnet CIDRs", check: cidrs},
}

func underRunPeerpod(v string) error {
	if !strings.HasPrefix(v, "/run/peerpod/") {
		return fmt.Errorf("%q: must be under /run/peerpod/, the host directory the DaemonSet mounts and kata's shim reads", v)
	}
	return nil
}

func port(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q is not a port (1-65535)", v)
	}
	return nil
}

func boolean(v string) error { _, err := setting.ParseBool(v); return err }

// noSkipVerify refuses TLS_SKIP_VERIFY=true: CAA would then take any
// certificate from whatever answers on a podVM's IP (upstream v0.22.0
// cmd/cloud-api-adaptor/main.go registers it "use it only for testing"),
// so another VM of the VPC could stand in for a podVM and receive the
// pod's containers, secrets and exec sessions.
func noSkipVerify(v string) error {
	b, err := setting.ParseBool(v)
	if err != nil {
		return err
	}
	if b {
		return fmt.Errorf("%q: CAA would accept any certificate from whatever answers on a podVM's address, so another VM in the VPC could impersonate a podVM; unset it (CAA verifies the certificate it issued each podVM)", v)
	}
	return nil
}

// scratchSpace refuses true: upstream's scratch space is a trusted_store
// partition systemd-repart makes at boot, LUKS-formatted with a key made in
// the VM, mounted at /run/kata-containers/image (CAA v0.22.0
// podvm/files/etc/systemd/system/scratch-storage.service,
// usr/local/bin/setup-scratch-storage, podvm/mkosi.images/system/
// mkosi.skeleton/usr/lib/repart.d/30-scratch.conf). The caa-gcp-t4 podVM
// has no such partition (its state partition takes the disk and holds
// /run/kata-containers), so CAA's marker would be ignored and the pod
// would run without the encryption the setting asks for.
func scratchSpace(v string) error {
	b, err := setting.ParseBool(v)
	if err != nil {
		return err
	}
	if b {
		return fmt.Errorf("true is not supported by the caa-gcp-t4 podVM: it has no encrypted scratch partition (upstream's trusted_store); image layers and emptyDirs go to its state partition, plain ext4 on the VM's own boot disk, deleted with the VM (docs/podvm-build-guide.md#scratch-space); unset it (--unset ENABLE_SCRATCH_SPACE) or set false")
	}
	return nil
}

func nonNegativeInt(v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		return fmt.Errorf("%q is not a whole number of 0 or more", v)
	}
	return nil
}

func positiveDuration(v string) error {
	d, err := time.ParseDuration(strings.TrimSpace(v))
	if err != nil || d <= 0 {
		return fmt.Errorf("%q is not a positive duration such as 5m", v)
	}
	return nil
}

// tlsVersion: CAA v0.22.0's tlsconfig.ParseTLSOptions takes Kubernetes'
// version names and refuses 1.0 and 1.1.
func tlsVersion(v string) error {
	switch strings.TrimSpace(v) {
	case "VersionTLS12", "VersionTLS13":
		return nil
	}
	return fmt.Errorf("%q: use VersionTLS12 or VersionTLS13", v)
}

// cipherSuites accepts the IANA names Go's crypto/tls implements (what
// Kubernetes' cliflag.TLSCipherSuites, which CAA uses, maps).
func cipherSuites(v string) error {
	known := map[string]bool{}
	for _, s := range tls.CipherSuites() {
		known[s.Name] = true
	}
	for _, s := range tls.InsecureCipherSuites() {
		known[s.Name] = true
	}
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" && !known[s] {
			return fmt.Errorf("%q is not a cipher suite name Go knows, e.g. TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256", s)
		}
	}
	return nil
}

func cidrs(v string) error {
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		if _, err := netip.ParsePrefix(s); err != nil {
			return fmt.Errorf("%q is not a CIDR such as 10.244.0.0/16", s)
		}
	}
	return nil
}

// initdata decodes INITDATA as CAA v0.22.0's pkg/initdata.Parse does
// (base64, gzip, TOML with an algorithm it can digest) so a bad value is
// refused here rather than by CAA at start.
func initdata(v string) error {
	zr, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(v)))
	if err != nil {
		return fmt.Errorf("not base64 of gzip data (%v); encode it: gzip -c initdata.toml | base64 -w0", err)
	}
	body, err := io.ReadAll(zr)
	if err != nil {
		return fmt.Errorf("not base64 of gzip data (%v); encode it: gzip -c initdata.toml | base64 -w0", err)
	}
	var doc struct {
		Algorithm string            `toml:"algorithm"`
		Version   string            `toml:"version"`
		Data      map[string]string `toml:"data"`
	}
	if err := toml.NewDecoder(bytes.NewReader(body)).Decode(&doc); err != nil {
		return fmt.Errorf("the decoded initdata is not TOML: %v", err)
	}
	switch doc.Algorithm {
	case "sha256", "sha384", "sha512":
	default:
		return fmt.Errorf("initdata algorithm %q: use sha256, sha384 or sha512", doc.Algorithm)
	}
	return nil
}

// KeyInfo describes one peer-pods-cm key for --help and the docs.
type KeyInfo struct {
	Env, Flag, Kind, Default, Usage string
	// Provider: gcp-t4 reads it (else CAA itself).
	Provider bool
}

// reaperKeys are the peer-pods-cm keys `gcp-t4 reaper` reads (its
// reg.XxxWithEnv flags in internal/gc/cmd.go, with the reaper's defaults).
var reaperKeys = []caaKey{
	{Env: "REAPER_INTERVAL", Flag: "interval", Kind: setting.KindDuration, Default: gc.DefaultReaperInterval.String(), Usage: "reaper: a pass every interval", check: positiveDuration},
	{Env: "REAPER_GRACE", Flag: "grace", Kind: setting.KindDuration, Default: gc.DefaultPolicy().Grace.String(), Usage: "reaper: leave orphans younger than this alone", check: nonNegativeDuration},
	{Env: "REAPER_METRICS_ADDR", Flag: "metrics-addr", Kind: setting.KindString, Default: gc.DefaultReaperMetricsAddr, Usage: "reaper: Prometheus metrics address (/metrics, /healthz)"},
}

func nonNegativeDuration(v string) error {
	d, err := time.ParseDuration(v)
	if err != nil || d < 0 {
		return fmt.Errorf("%q is not a duration such as 10m", v)
	}
	return nil
}

// ConfigKeys are every key `--set` accepts: what CAA v0.22.0 reads, what
// the gcp-t4 provider reads and what the reaper reads, sorted.
// GCP_CREDENTIALS is not among them: it lives in the Secret; nor is
// NODE_NAME, which the DaemonSet sets from the downward API (as upstream's
// chart does, templates/daemonset.yaml at 38d0fcf7), never peer-pods-cm.
func ConfigKeys() []KeyInfo {
	var out []KeyInfo
	for _, k := range caaKeys {
		out = append(out, KeyInfo{Env: k.Env, Flag: k.Flag, Kind: k.Kind, Default: k.Default, Usage: k.Usage})
	}
	for _, k := range reaperKeys {
		out = append(out, KeyInfo{Env: k.Env, Flag: k.Flag, Kind: k.Kind, Default: k.Default, Usage: k.Usage})
	}
	for _, k := range gcpt4.Keys() {
		if k.Env == credentialsFile || k.Env == "NODE_NAME" {
			continue
		}
		out = append(out, KeyInfo{Env: k.Env, Flag: k.Flag, Kind: k.Kind, Default: k.Default, Usage: k.Usage, Provider: true})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Env < out[j].Env })
	return out
}

func keyNames() []string {
	var names []string
	for _, k := range ConfigKeys() {
		names = append(names, k.Env)
	}
	return names
}

func isKey(k string) bool { return slices.Contains(keyNames(), k) }

// unknownKey is the error for a setting that no reader knows: the nearest
// key when one is a likely typo (a few edits away), else every key.
func unknownKey(what, k string) error {
	if near := nearestKey(k); near != "" {
		return fmt.Errorf("%s: not a peer-pods-cm key CAA %s or gcp-t4 reads; did you mean %s? (every key: docs/provider.md)", what, UpstreamRelease, near)
	}
	return fmt.Errorf("%s: not a peer-pods-cm key CAA %s or gcp-t4 reads; use one of %s (docs/provider.md)", what, UpstreamRelease, strings.Join(keyNames(), ", "))
}

// nearestKey is the key fewest edits from k (case ignored), or the keys
// tied for it ("GCP_ZONE or GCP_ZONES"), if at most a third of k's length
// away; "" otherwise.
func nearestKey(k string) string {
	var best []string
	bestD := len(k)/3 + 1
	for _, name := range keyNames() {
		switch d := editDistance(strings.ToUpper(k), name); {
		case d < bestD:
			best, bestD = []string{name}, d
		case d == bestD && best != nil:
			best = append(best, name)
		}
	}
	return strings.Join(best, " or ")
}

// editDistance is Levenshtein's distance over bytes (keys are ASCII). A
// dozen lines do not justify a dependency.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur := make([]int, len(b)+1)
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			sub := prev[j-1]
			if a[i-1] != b[j-1] {
				sub++
			}
			cur[j] = min(sub, prev[j]+1, cur[j-1]+1)
		}
		prev = cur
	}
	return prev[len(b)]
}

// ValidateConfig checks a complete peer-pods-cm as CAA and the provider
// will read it: CAA's own keys with CAA's rules, the provider's with the
// provider's strict parsing and Validate, and the TLS files against the
// certificate Secret. Every error names the key.
func ValidateConfig(cfg map[string]string, tlsMounted bool) error {
	var errs []string
	for _, k := range append(slices.Clone(caaKeys), reaperKeys...) {
		v := cfg[k.Env]
		if v == "" || k.check == nil {
			continue
		}
		if err := k.check(v); err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", k.Env, err))
		}
	}
	if v, c := cfg["TLS_MIN_VERSION"], cfg["TLS_CIPHER_SUITES"]; strings.TrimSpace(v) == "VersionTLS13" && strings.TrimSpace(c) != "" {
		errs = append(errs, "TLS_CIPHER_SUITES: Go's crypto/tls does not configure TLS 1.3 suites; unset it (--unset TLS_CIPHER_SUITES) or use VersionTLS12")
	}
	files := 0
	for _, f := range []struct{ key, want string }{{"CACERT_FILE", tlsDir + "/" + tlsCAKey}, {"CERT_FILE", tlsDir + "/" + tlsCertKey}, {"CERT_KEY", tlsDir + "/" + tlsKeyKey}} {
		v := cfg[f.key]
		if v == "" {
			continue
		}
		files++
		if !tlsMounted {
			errs = append(errs, fmt.Sprintf("%s=%s: no certificate Secret is mounted; pass --tls-ca, --tls-cert and --tls-key (which set the three keys) instead", f.key, v))
		} else if v != f.want {
			errs = append(errs, fmt.Sprintf("%s=%s: the certificate Secret is mounted at %s; drop the setting (install sets it)", f.key, v, f.want))
		}
	}
	if files != 0 && files != 3 {
		errs = append(errs, "CACERT_FILE, CERT_FILE, CERT_KEY: CAA uses custom certificates only with all three; give --tls-ca, --tls-cert and --tls-key together")
	}
	pc, err := gcpt4.ConfigFromEnv(func(k string) (string, bool) { v, ok := cfg[k]; return v, ok })
	if err != nil {
		errs = append(errs, err.Error())
	} else if err := pc.Validate(); err != nil {
		errs = append(errs, err.Error())
	} else if _, err := catalog.New("", pc.Profiles); err != nil { // GCP_PROFILES_FILE is a path in the pod
		errs = append(errs, err.Error())
	}
	if len(errs) > 0 {
		return fmt.Errorf("peer-pods-cm would not work:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

// Command standin stands in for the six guest binaries in the boot test's
// image (test/podvm/boot-test.sh). Installed under each slot's name, it does
// what the real program does at its seams and nothing more: it records its
// argv, environment and what it found at start, and listens where the real
// one listens, so that the boot test can check the units' command lines,
// ordering and sockets without the upstream binaries. The kata-agent
// stand-in also writes the boot's report once systemd says the boot is over.
//
// What each real program does at those seams, at the versions pinned
// (CAA v0.22.0 = 38d0fcf7c7b7, kata 4.0.0 = cf82bb35c803, guest-components
// dcd55ea16ea4):
//   - process-user-data provision-files: GETs the GCE metadata attribute
//     user-data with Metadata-Flavor: Google (pkg/userdata/provision.go),
//     writes the cloud-config's /run/peerpod/initdata (or digests upstream's
//     dummy initdata when there is none) and the hex digest of the decoded
//     initdata TOML, in its algorithm, to /run/peerpod/initdata.digest
//     (provision.go extractInitdataAndHash, pkg/initdata/initdata.go), then
//     exits. The podVM's unit extends PCR 8 with that digest. Served the
//     metadata attribute caa-gcp-t4-standin-process-user-data=no-digest it
//     leaves no digest file behind and still exits 0 (the boot test's
//     missing-digest case: measure-initdata must fail closed).
//   - kata-agent --config F: listens on F's server_addr (a unix socket),
//     reads /etc/kata-opa/default-policy.rego at start and probes the CDH
//     socket once (src/agent/src/main.rs).
//   - agent-protocol-forwarder: opens -pod-namespace (failing without it),
//     listens on -listen (default 0.0.0.0:15150) in its own namespace and
//     tells systemd it is ready (cmd/agent-protocol-forwarder/main.go,
//     pkg/forwarder/forwarder.go, cmd/starter.go).
//   - confidential-data-hub: listens on /run/confidential-containers/cdh.sock.
//     The stand-in listens a few seconds after its start (so the boot test
//     sees kata-agent held back until the socket exists, not merely started
//     after it) and records when; served the metadata attribute
//     caa-gcp-t4-standin-cdh=never-listen it never listens (the boot test's
//     CDH-never-comes case).
//   - attestation-agent: listens on /run/confidential-containers/
//     attestation-agent/attestation-agent.sock.
//   - api-server-rest: listens on 127.0.0.1:8006.
package main

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"
)

// recordDir is on the root disk, so the boot test reads it after power-off.
const recordDir = "/var/lib/caa-gcp-t4-standin"

type record struct {
	Name    string            `json:"name"`
	Argv    []string          `json:"argv"`
	Env     map[string]string `json:"env"`
	NetNS   string            `json:"netns"`
	Uptime  string            `json:"uptime"`
	Found   map[string]any    `json:"found"`
	Listens []string          `json:"listens,omitempty"`
	Error   string            `json:"error,omitempty"`
}

func main() {
	name := filepath.Base(os.Args[0])
	r := &record{Name: name, Argv: os.Args[1:], Env: map[string]string{}, Found: map[string]any{}}
	for _, k := range []string{"OCICRYPT_KEYPROVIDER_CONFIG", "CDH_DEFAULT_IMAGE_AUTHENTICATED_REGISTRY_CREDENTIALS", "NOTIFY_SOCKET"} {
		if v, ok := os.LookupEnv(k); ok {
			r.Env[k] = v
		}
	}
	r.NetNS, _ = os.Readlink("/proc/self/ns/net")
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		r.Uptime = strings.Fields(string(b))[0]
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var err error
	switch name {
	case "process-user-data":
		err = processUserData(ctx, r)
	case "kata-agent":
		err = kataAgent(ctx, r)
	case "agent-protocol-forwarder":
		err = forwarder(ctx, r)
	case "confidential-data-hub":
		err = confidentialDataHub(ctx, r)
	case "attestation-agent":
		err = serveUnix(ctx, r, "/run/confidential-containers/attestation-agent/attestation-agent.sock")
	case "api-server-rest":
		err = serveTCP(ctx, r, "127.0.0.1:8006", false)
	default:
		err = fmt.Errorf("standin: unknown slot name %q", name)
	}
	if err != nil {
		r.Error = err.Error()
		save(r)
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func save(r *record) {
	b, _ := json.Marshal(r)
	writeFile(filepath.Join(recordDir, r.Name+".json"), b)
	console("CAA-GCP-T4-STANDIN " + string(b))
}

func writeFile(path string, b []byte) {
	_ = os.MkdirAll(filepath.Dir(path), 0o755)
	f, err := os.Create(path + ".tmp")
	if err != nil {
		return
	}
	_, _ = f.Write(b)
	_ = f.Sync()
	_ = f.Close()
	_ = os.Rename(path+".tmp", path)
}

func console(line string) {
	if f, err := os.OpenFile("/dev/console", os.O_WRONLY|os.O_APPEND, 0); err == nil {
		fmt.Fprintln(f, line)
		f.Close()
	}
}

func processUserData(ctx context.Context, r *record) error {
	if len(r.Argv) == 0 || r.Argv[0] != "provision-files" {
		return fmt.Errorf("want the provision-files command, got %q", r.Argv)
	}
	url := "http://metadata.google.internal/computeMetadata/v1/instance/attributes/user-data"
	var last error
	for i := 0; i < 30; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			sum := sha256.Sum256(body)
			r.Found["user_data_status"] = resp.StatusCode
			r.Found["user_data_sha256"] = hex.EncodeToString(sum[:])
			d, err := initdataDigest(body)
			if err != nil {
				return err
			}
			r.Found["initdata_digest"] = d
			mode := metadataAttribute(ctx, "caa-gcp-t4-standin-process-user-data")
			r.Found["mode"] = mode
			if mode == "no-digest" {
				if err := os.Remove(digestPath); err != nil {
					return fmt.Errorf("no-digest mode: %w", err)
				}
			}
			save(r)
			return nil
		}
		last = err
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return fmt.Errorf("metadata server: %w", last)
}

// digestPath is where upstream's process-user-data writes the initdata's
// hex digest (CAA v0.22.0 pkg/userdata/provision.go DigestPath).
const digestPath = "/run/peerpod/initdata.digest"

// dummyInitdata is upstream's generateDummyInitdata TOML (CAA v0.22.0
// pkg/userdata/provision.go), digested when the user-data carries none.
const dummyInitdata = "algorithm = \"sha256\"\nversion = \"0.1.0\"\n\n[data]\n\"aa.toml\" = '''\n'''"

// initdataDigest does what upstream's provision-files does with the
// initdata: the write_files entry for /run/peerpod/initdata holds it as
// base64(gzip(TOML)); the digest is of the TOML bytes, in the TOML's
// algorithm. The cloud-config is read line by line (the test's fixture
// writes content as a literal block), not with a YAML parser: the stand-in
// stays stdlib-only.
func initdataDigest(userData []byte) (string, error) {
	cc, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(userData)))
	if err != nil {
		return "", fmt.Errorf("user-data is not base64: %w", err)
	}
	var enc strings.Builder
	lines := strings.Split(string(cc), "\n")
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "- path: /run/peerpod/initdata" {
			continue
		}
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "content: |"; i++ {
		}
		for i++; i < len(lines) && strings.HasPrefix(lines[i], "      "); i++ {
			enc.WriteString(strings.TrimSpace(lines[i]))
		}
		break
	}
	var toml []byte
	if enc.Len() == 0 {
		toml = []byte(dummyInitdata)
	} else {
		writeFile("/run/peerpod/initdata", []byte(enc.String()))
		gz, err := gzip.NewReader(base64.NewDecoder(base64.StdEncoding, strings.NewReader(enc.String())))
		if err != nil {
			return "", fmt.Errorf("initdata is not base64 gzip: %w", err)
		}
		if toml, err = io.ReadAll(gz); err != nil {
			return "", fmt.Errorf("initdata: %w", err)
		}
	}
	var sum []byte
	switch alg := tomlString(string(toml), "algorithm"); alg {
	case "sha256":
		s := sha256.Sum256(toml)
		sum = s[:]
	case "sha384":
		s := sha512.Sum384(toml)
		sum = s[:]
	case "sha512":
		s := sha512.Sum512(toml)
		sum = s[:]
	default:
		return "", fmt.Errorf("initdata algorithm %q is not sha256, sha384 or sha512", alg)
	}
	d := hex.EncodeToString(sum)
	writeFile(digestPath, []byte(d))
	return d, nil
}

// tomlString finds a top-level key = "value" line (before the first table).
func tomlString(toml, key string) string {
	for _, l := range strings.Split(toml, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "[") {
			break
		}
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.TrimSpace(k) == key {
			return strings.Trim(strings.TrimSpace(v), `"`)
		}
	}
	return ""
}

func socketPath(config string) (string, error) {
	b, err := os.ReadFile(config)
	if err != nil {
		return "", err
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if ok && strings.TrimSpace(k) == "server_addr" {
			return strings.TrimPrefix(strings.Trim(strings.TrimSpace(v), `"`), "unix://"), nil
		}
	}
	return "", fmt.Errorf("no server_addr in %s", config)
}

func kataAgent(ctx context.Context, r *record) error {
	if len(r.Argv) != 2 || r.Argv[0] != "--config" {
		return fmt.Errorf("want --config FILE, got %q", r.Argv)
	}
	sock, err := socketPath(r.Argv[1])
	if err != nil {
		return err
	}
	// The real agent aborts without its default policy.
	pol, err := os.ReadFile("/etc/kata-opa/default-policy.rego")
	if err != nil {
		return fmt.Errorf("default policy: %w", err)
	}
	sum := sha256.Sum256(pol)
	r.Found["policy_sha256"] = hex.EncodeToString(sum[:])
	fi, err := os.Stat("/run/confidential-containers/cdh.sock")
	r.Found["cdh_socket_at_start"] = err == nil && fi.Mode()&os.ModeSocket != 0
	_, err = os.Stat("/pause_bundle/config.json")
	r.Found["pause_bundle"] = err == nil
	var st syscall.Statfs_t
	if err := syscall.Statfs("/run/kata-containers", &st); err == nil {
		r.Found["kata_containers_fs_type"] = fmt.Sprintf("0x%x", st.Type)
		r.Found["kata_containers_bytes"] = uint64(st.Blocks) * uint64(st.Bsize)
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	r.Listens = append(r.Listens, "unix:"+sock)
	save(r)
	go report(ctx)
	return serve(ctx, l)
}

// flagValue reads a flag the way Go's flag package does (-f v, -f=v, --f).
func flagValue(args []string, name, def string) string {
	for i := 0; i < len(args); i++ {
		a := strings.TrimLeft(args[i], "-")
		if a == name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, name+"="); ok {
			return v
		}
	}
	return def
}

func forwarder(ctx context.Context, r *record) error {
	ns := flagValue(r.Argv, "pod-namespace", "/run/netns/podns")
	f, err := os.Open(ns)
	if err != nil {
		return fmt.Errorf("failed to open network namespace %q: %w", ns, err)
	}
	f.Close()
	r.Found["pod_netns"] = nsID(ns)
	agent := flagValue(r.Argv, "kata-agent-socket", "/run/kata-containers/agent.sock")
	c, err := net.Dial("unix", agent)
	r.Found["agent_socket_dialled"] = err == nil
	if err == nil {
		c.Close()
	}
	return serveTCP(ctx, r, flagValue(r.Argv, "listen", "0.0.0.0:15150"), true)
}

func nsID(path string) string {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return ""
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

// cdhListenDelay opens a window in which everything kata-agent is ordered
// after is done but CDH's socket is absent: an agent started in it would
// find no socket (the report's cdh_socket_at_start, and its start time
// against listen_uptime, say whether it was).
const cdhListenDelay = 5 * time.Second

func confidentialDataHub(ctx context.Context, r *record) error {
	mode := metadataAttribute(ctx, "caa-gcp-t4-standin-cdh")
	r.Found["mode"] = mode
	if mode == "never-listen" {
		save(r)
		<-ctx.Done()
		return nil
	}
	// A boot with a cache disk: the boot test's client on the host reaches
	// the podVM's mirror, which listens on the VM's loopback where CDH's
	// image-rs dials it, through this relay (QEMU forwards a host port to
	// it). Only the stand-in relays; the image has no such listener.
	if relay := metadataAttribute(ctx, "caa-gcp-t4-standin-cdh-relay"); relay != "" {
		l, err := net.Listen("tcp", relay)
		if err != nil {
			return fmt.Errorf("relay: %w", err)
		}
		r.Found["relay"] = relay + " -> " + cacheMirror
		r.Listens = append(r.Listens, "tcp:"+l.Addr().String())
		go relayTo(ctx, l, cacheMirror)
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(cdhListenDelay):
	}
	if b, err := os.ReadFile("/proc/uptime"); err == nil {
		r.Found["listen_uptime"] = strings.Fields(string(b))[0]
	}
	return serveUnix(ctx, r, "/run/confidential-containers/cdh.sock")
}

// cacheMirror is where the podVM's cache mirror listens, in the VM's own
// namespace (caa-gcp-t4-cache-mirror.service).
const cacheMirror = "127.0.0.1:5000"

// relayTo copies each connection accepted on l to and from addr.
func relayTo(ctx context.Context, l net.Listener, addr string) {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			u, err := net.Dial("tcp", addr)
			if err != nil {
				return
			}
			defer u.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(u, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, u); done <- struct{}{} }()
			<-done
		}()
	}
}

// metadataAttribute is the instance attribute's value, or "" when the
// metadata server does not have it (or cannot be reached in 10 s).
func metadataAttribute(ctx context.Context, name string) string {
	url := "http://metadata.google.internal/computeMetadata/v1/instance/attributes/" + name
	for i := 0; i < 10; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Metadata-Flavor", "Google")
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return ""
			}
			return strings.TrimSpace(string(body))
		}
		select {
		case <-ctx.Done():
			return ""
		case <-time.After(time.Second):
		}
	}
	return ""
}

func serveUnix(ctx context.Context, r *record, sock string) error {
	if err := os.MkdirAll(filepath.Dir(sock), 0o755); err != nil {
		return err
	}
	_ = os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	r.Listens = append(r.Listens, "unix:"+sock)
	save(r)
	return serve(ctx, l)
}

func serveTCP(ctx context.Context, r *record, addr string, notify bool) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	r.Listens = append(r.Listens, "tcp:"+l.Addr().String())
	save(r)
	if notify {
		sdNotify("READY=1")
	}
	return serve(ctx, l)
}

func sdNotify(state string) {
	p := os.Getenv("NOTIFY_SOCKET")
	if p == "" {
		return
	}
	if c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: p, Net: "unixgram"}); err == nil {
		_, _ = c.Write([]byte(state))
		c.Close()
	}
}

func serve(ctx context.Context, l net.Listener) error {
	go func() { <-ctx.Done(); l.Close() }()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		c.Close()
	}
}

// Units whose state the report records (systemctl show).
var units = []string{
	"caa-gcp-t4-gpu-init.service", "caa-gcp-t4-slots.service", "netns@podns.service",
	`run-kata\x2dcontainers.mount`, "process-user-data.service", "attestation-agent.service",
	"confidential-data-hub.service", "kata-agent.path", "kata-agent.service", "caa-gcp-t4-cdh-check.service",
	"agent-protocol-forwarder.path",
	"agent-protocol-forwarder.service", "api-server-rest.service", "systemd-resolved.service",
	"caa-gcp-t4-notice.socket", "caa-gcp-t4-notice.service",
	"caa-gcp-t4-cache-open.service", "caa-gcp-t4-cache-mirror.service", `run-caa\x2dgcp\x2dt4-cache.mount`,
	"caa-gcp-t4-cache-store.service", "caa-gcp-t4-layer-sweep.service",
}

var props = "Id,ActiveState,SubState,Result,NRestarts,ConditionResult,ExecMainStartTimestampMonotonic,ActiveEnterTimestampMonotonic,InactiveExitTimestampMonotonic"

// report waits until systemd has no more start jobs, then records the
// units' states, every listening socket in the root and pod namespaces,
// and /run/peerpod, /run/netns and the /run/kata-containers mount.
func report(ctx context.Context) {
	rep := map[string]any{}
	ctx, cancel := context.WithTimeout(ctx, 20*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "systemctl", "is-system-running", "--wait").Output()
	rep["system_state"] = strings.TrimSpace(string(out))
	if err != nil {
		rep["system_state_error"] = err.Error()
	}
	// Units started later by a path unit (the forwarder, once this agent
	// listens) may still be starting when the boot counts as done: wait,
	// bounded, for each filled slot's unit to be active.
	for _, slot := range []string{"agent-protocol-forwarder", "api-server-rest", "confidential-data-hub"} {
		if _, err := os.Stat("/usr/local/bin/" + slot); err != nil {
			continue
		}
		for i := 0; i < 300 && ctx.Err() == nil; i++ {
			o, _ := exec.CommandContext(ctx, "systemctl", "is-active", slot+".service").Output()
			if strings.TrimSpace(string(o)) == "active" {
				break
			}
			time.Sleep(time.Second)
		}
	}
	show, _ := exec.CommandContext(ctx, "systemctl", append([]string{"show", "-p", props}, units...)...).Output()
	rep["units"] = parseShow(string(show))
	rep["listening_root"] = listening("/proc/self/net")
	rep["listening_podns"] = inNetNS("/run/netns/podns", func() any { return listening("/proc/thread-self/net") })
	rep["notice_podns"] = inNetNS("/run/netns/podns", func() any { return podNotice(ctx) })
	rep["run_peerpod"] = listDir("/run/peerpod")
	rep["run_netns"] = listDir("/run/netns")
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == "/run/kata-containers" {
				rep["kata_containers_mount"] = l
			} else if len(f) > 4 && f[4] == "/run/caa-gcp-t4/cache" {
				rep["cache_mount"] = l
			}
		}
	}
	trust(ctx, rep)
	rep["store_mount"] = storeMount(goodConfig(ctx))
	rep["overlay_flags"] = overlayFlags()
	if pb := pullBench(ctx); pb != nil {
		rep["pull_bench"] = pb
	}
	for k, args := range map[string][]string{
		"podns_addresses": {"ip", "-n", "podns", "-br", "address"},
		"podns_routes":    {"ip", "-n", "podns", "route"},
	} {
		o, _ := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
		rep[k] = strings.TrimSpace(string(o))
	}
	// The journal of the guest units, for a person reading the results.
	j, _ := exec.CommandContext(ctx, "journalctl", "--no-pager", "-o", "short-monotonic", "-b",
		"-u", "process-user-data", "-u", "agent-protocol-forwarder", "-u", "kata-agent",
		"-u", "confidential-data-hub", "-u", "attestation-agent", "-u", "api-server-rest",
		"-u", "caa-gcp-t4-cache-open", "-u", "caa-gcp-t4-cache-mirror", "-u", "caa-gcp-t4-cache-store").CombinedOutput()
	writeFile(filepath.Join(recordDir, "journal.txt"), j)
	b, _ := json.Marshal(rep)
	writeFile(filepath.Join(recordDir, "report.json"), b)
	console("CAA-GCP-T4-STANDIN-REPORT " + string(b))
}

// podNotice asks the podVM's notice endpoint what a container in the pod
// would, from the pod's namespace, and waits (bounded) for the notice the
// boot test's metadata server gives. It dials on the calling thread, which
// inNetNS has moved into that namespace (http.Client would dial from
// another thread, in the VM's namespace).
func podNotice(ctx context.Context) any {
	d := net.Dialer{}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	c, err := d.DialContext(ctx, "tcp", "127.0.0.1:8007")
	if err != nil {
		return "dial: " + err.Error()
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, "GET /v1/notice?wait=true HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"); err != nil {
		return "write: " + err.Error()
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return "read: " + err.Error()
	}
	defer resp.Body.Close()
	var n map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&n); err != nil {
		return "decode: " + err.Error()
	}
	return n
}

// trust records what the trust boundary looks like from inside: the root's
// mount and the device-mapper device under it, whether the root can be
// written, the firmware's Secure Boot state and the kernel's lockdown, and
// what loading the NVIDIA module (signed at build time) gives: without a
// GPU it fails in the driver's probe, after the signature check, with "No
// such device"; a signature the kernel does not trust fails first, with
// "Key was rejected by service".
func trust(ctx context.Context, rep map[string]any) {
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == "/" {
				rep["root_mount"] = l
			}
		}
	}
	dms := map[string]string{}
	if ds, err := filepath.Glob("/sys/block/dm-*/dm"); err == nil {
		for _, d := range ds {
			n, _ := os.ReadFile(filepath.Join(d, "name"))
			u, _ := os.ReadFile(filepath.Join(d, "uuid"))
			dms[strings.TrimSpace(string(n))] = strings.TrimSpace(string(u))
		}
	}
	rep["dm_devices"] = dms
	if err := os.WriteFile("/etc/caa-gcp-t4-standin-probe", []byte("x"), 0o644); err != nil {
		rep["root_write"] = err.Error()
	} else {
		rep["root_write"] = "written"
	}
	// SecureBoot-<EFI global variable GUID>: 4 attribute bytes, then 1 or 0.
	if b, err := os.ReadFile("/sys/firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"); err == nil && len(b) == 5 {
		rep["secure_boot"] = int(b[4])
	}
	if b, err := os.ReadFile("/sys/kernel/security/lockdown"); err == nil {
		rep["lockdown"] = strings.TrimSpace(string(b))
	}
	o, err := exec.CommandContext(ctx, "modprobe", "nvidia").CombinedOutput()
	rep["modprobe_nvidia"] = strings.TrimSpace(string(o))
	if err == nil {
		rep["modprobe_nvidia"] = "loaded"
	}
	if b, err := os.ReadFile("/proc/sys/kernel/tainted"); err == nil {
		rep["tainted"] = strings.TrimSpace(string(b))
	}
}

func parseShow(s string) map[string]map[string]string {
	out := map[string]map[string]string{}
	cur := map[string]string{}
	flush := func() {
		if id := cur["Id"]; id != "" {
			out[id] = cur
		}
		cur = map[string]string{}
	}
	for _, l := range strings.Split(s, "\n") {
		if l == "" {
			flush()
			continue
		}
		k, v, _ := strings.Cut(l, "=")
		cur[k] = v
	}
	flush()
	return out
}

// listening returns "proto addr:port" for TCP sockets in LISTEN and bound
// UDP sockets, from a /proc/<…>/net directory.
func listening(dir string) []string {
	var out []string
	for _, p := range []string{"tcp", "tcp6", "udp", "udp6"} {
		f, err := os.Open(filepath.Join(dir, p))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Scan()
		for sc.Scan() {
			fl := strings.Fields(sc.Text())
			if len(fl) < 4 {
				continue
			}
			if (strings.HasPrefix(p, "tcp") && fl[3] != "0A") || (strings.HasPrefix(p, "udp") && fl[3] != "07") {
				continue
			}
			out = append(out, p+" "+decodeAddr(fl[1]))
		}
		f.Close()
	}
	sort.Strings(out)
	return out
}

func decodeAddr(s string) string {
	h, port, _ := strings.Cut(s, ":")
	b, _ := hex.DecodeString(h)
	// /proc/net prints the address in host byte order, 32 bits at a time.
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
	var pn int
	fmt.Sscanf(port, "%X", &pn)
	return net.JoinHostPort(net.IP(b).String(), fmt.Sprint(pn))
}

// inNetNS runs fn on a thread moved into the namespace at path; the thread
// is never handed back to the scheduler (it exits with the goroutine).
func inNetNS(path string, fn func() any) any {
	ch := make(chan any, 1)
	go func() {
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			ch <- "open " + path + ": " + err.Error()
			return
		}
		defer f.Close()
		const sysSetns, cloneNewnet = 308, 0x40000000
		if _, _, e := syscall.RawSyscall(sysSetns, f.Fd(), cloneNewnet, 0); e != 0 {
			ch <- "setns " + path + ": " + e.Error()
			return
		}
		ch <- fn()
	}()
	return <-ch
}

func listDir(dir string) []string {
	es, err := os.ReadDir(dir)
	if err != nil {
		return []string{"error: " + err.Error()}
	}
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out
}

// workDir is image-rs's work_dir, where podvm-cache-store puts the cache
// disk's meta_store.json (image-rs/src/config.rs:17 at dcd55ea16ea4).
const workDir = "/run/kata-containers/image"

// storeMount does what image-rs at the pin does for a stored image, for
// the first image (by config digest) of the meta_store.json
// podvm-cache-store wrote: its layers' store_paths, last first, as an
// overlay's lowerdirs with an upper and a work directory under
// work_dir/overlay (image-rs/src/image.rs:526-538, snapshots/overlay.rs),
// then reads every file through the mount. Nothing when there is no
// meta_store.json.
// goodConfig is the config digest of the boot test's untampered image
// (caa-gcp-t4-standin-pull), which storeMount mounts and reads whole: the
// other image's layer was changed on the disk and its read must fail.
func goodConfig(ctx context.Context) string {
	var s pullSpec
	if json.Unmarshal([]byte(metadataAttribute(ctx, "caa-gcp-t4-standin-pull")), &s) != nil || s.Good == "" {
		return ""
	}
	p, err := manifestAndConfig(ctx, s.Good)
	if err != nil {
		return ""
	}
	return p.config
}

func storeMount(prefer string) map[string]any {
	out := map[string]any{}
	b, err := os.ReadFile(filepath.Join(workDir, "meta_store.json"))
	if err != nil {
		out["meta_store"] = err.Error()
		return out
	}
	var ms struct {
		ImageDB map[string]struct {
			LayerMetas []struct {
				StorePath string `json:"store_path"`
			} `json:"layer_metas"`
		} `json:"image_db"`
	}
	if err := json.Unmarshal(b, &ms); err != nil {
		out["meta_store"] = err.Error()
		return out
	}
	sum := sha256.Sum256(b)
	out["meta_store_sha256"] = hex.EncodeToString(sum[:])
	out["images"] = len(ms.ImageDB)
	var ids []string
	for id := range ms.ImageDB {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	if len(ids) == 0 {
		return out
	}
	if _, ok := ms.ImageDB[prefer]; ok {
		ids[0] = prefer
	}
	var lower []string
	lm := ms.ImageDB[ids[0]].LayerMetas
	for i := len(lm) - 1; i >= 0; i-- {
		lower = append(lower, lm[i].StorePath)
	}
	idx := filepath.Join(workDir, "overlay", "standin-probe")
	target := filepath.Join(idx, "rootfs")
	for _, d := range []string{"upperdir", "workdir", "rootfs"} {
		_ = os.MkdirAll(filepath.Join(idx, d), 0o755)
	}
	defer os.RemoveAll(idx)
	opts := "lowerdir=" + strings.Join(lower, ":") + ",upperdir=" + filepath.Join(idx, "upperdir") + ",workdir=" + filepath.Join(idx, "workdir")
	out["image"] = ids[0]
	out["lowerdirs"] = len(lower)
	start := time.Now()
	if err := syscall.Mount("overlay", target, "overlay", 0, opts); err != nil {
		out["mount"] = err.Error()
		return out
	}
	out["mount_ms"] = time.Since(start).Milliseconds()
	out["mount"] = "mounted"
	readWhole(target, out)
	if err := syscall.Unmount(target, 0); err != nil {
		out["unmount"] = err.Error()
	}
	return out
}

// msNoSymfollow is MS_NOSYMFOLLOW (Linux 5.10), which package syscall
// does not name.
const msNoSymfollow = 0x100

// overlayFlags answers, on this podVM's kernel, whether the cache disk's
// mount flags reach through an overlay that takes it as a lowerdir: a
// tmpfs holding a copy of /usr/bin/true and a symbolic link to it is
// remounted with the disk's flags (ro, nodev, nosuid, noexec,
// nosymfollow), then used as an overlay's only lowerdir, mounted with no
// flags as image-rs mounts a container's rootfs. The program and the link
// are tried on the lower mount itself (the flags must refuse them there)
// and through the overlay.
func overlayFlags() map[string]string {
	out := map[string]string{}
	base, err := os.MkdirTemp("/run", "caa-gcp-t4-standin-ovl-")
	if err != nil {
		out["error"] = err.Error()
		return out
	}
	defer os.RemoveAll(base)
	lower, rw, merged := filepath.Join(base, "lower"), filepath.Join(base, "rw"), filepath.Join(base, "merged")
	for _, d := range []string{lower, rw, merged} {
		_ = os.Mkdir(d, 0o755)
	}
	if err := syscall.Mount("tmpfs", lower, "tmpfs", 0, "size=16m"); err != nil {
		out["error"] = "tmpfs: " + err.Error()
		return out
	}
	defer syscall.Unmount(lower, syscall.MNT_DETACH)
	if err := syscall.Mount("tmpfs", rw, "tmpfs", 0, "size=16m"); err != nil {
		out["error"] = "tmpfs: " + err.Error()
		return out
	}
	defer syscall.Unmount(rw, syscall.MNT_DETACH)
	prog, err := os.ReadFile("/usr/bin/true")
	if err == nil {
		err = os.WriteFile(filepath.Join(lower, "prog"), prog, 0o755)
	}
	if err == nil {
		err = os.Symlink("prog", filepath.Join(lower, "link"))
	}
	if err == nil {
		err = syscall.Mount("", lower, "", syscall.MS_REMOUNT|syscall.MS_RDONLY|syscall.MS_NODEV|syscall.MS_NOSUID|syscall.MS_NOEXEC|msNoSymfollow, "")
	}
	if err != nil {
		out["error"] = "lower: " + err.Error()
		return out
	}
	for _, d := range []string{"upper", "work"} {
		_ = os.Mkdir(filepath.Join(rw, d), 0o755)
	}
	if err := syscall.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+filepath.Join(rw, "upper")+",workdir="+filepath.Join(rw, "work")); err != nil {
		out["error"] = "overlay: " + err.Error()
		return out
	}
	defer syscall.Unmount(merged, syscall.MNT_DETACH)
	run := func(p string) string {
		if err := exec.Command(p).Run(); err != nil {
			return err.Error()
		}
		return "ok"
	}
	follow := func(p string) string {
		f, err := os.Open(p)
		if err != nil {
			return err.Error()
		}
		f.Close()
		return "ok"
	}
	out["lower_exec"] = run(filepath.Join(lower, "prog"))
	out["lower_link"] = follow(filepath.Join(lower, "link"))
	out["overlay_exec"] = run(filepath.Join(merged, "prog"))
	out["overlay_link"] = follow(filepath.Join(merged, "link"))
	out["overlay_exec_link"] = run(filepath.Join(merged, "link"))
	return out
}

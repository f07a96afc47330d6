// Package controlplane starts a real etcd and kube-apiserver on loopback,
// with temporary data, for tests that need the API server's own validation,
// defaulting, server-side apply and RBAC rather than a fake. The binaries are
// built from the Go module proxy by `make controlplane` and found through
// environment variables the Makefile sets; see README.md.
package controlplane

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/rest"
)

// Environment variables naming the binaries; the Makefile sets them.
const (
	EnvKubeAPIServer = "CONTROLPLANE_KUBE_APISERVER"
	EnvEtcd          = "CONTROLPLANE_ETCD"
	// MakeCommand builds (or reuses) both binaries and prints the
	// variables to export.
	MakeCommand = "make controlplane"
)

// ErrNoBinaries is returned when the binaries are not configured or absent.
var ErrNoBinaries = errors.New("control-plane binaries missing")

// Binaries are the executables a control plane runs.
type Binaries struct {
	KubeAPIServer string
	Etcd          string
}

// BinariesFromEnv reads CONTROLPLANE_KUBE_APISERVER and CONTROLPLANE_ETCD and
// checks both are executable files. The error says how to get them.
func BinariesFromEnv() (Binaries, error) {
	b := Binaries{KubeAPIServer: os.Getenv(EnvKubeAPIServer), Etcd: os.Getenv(EnvEtcd)}
	var problems []string
	for _, c := range []struct{ env, path string }{{EnvKubeAPIServer, b.KubeAPIServer}, {EnvEtcd, b.Etcd}} {
		if c.path == "" {
			problems = append(problems, c.env+" is not set")
			continue
		}
		st, err := os.Stat(c.path)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("%s=%s: %v", c.env, c.path, err))
		case st.IsDir() || st.Mode()&0o111 == 0:
			problems = append(problems, fmt.Sprintf("%s=%s is not an executable file", c.env, c.path))
		}
	}
	if len(problems) > 0 {
		return b, fmt.Errorf("%w: %s; run `%s` (builds kube-apiserver and etcd once, cached by version) and export what it prints, or run the tests through `make test`",
			ErrNoBinaries, strings.Join(problems, "; "), MakeCommand)
	}
	return b, nil
}

// Options tune a control plane. The zero value is usable.
type Options struct {
	// Dir holds data, certificates, logs and the kubeconfig; a new
	// temporary directory (removed by Stop) when empty.
	Dir string
	// ExtraAPIServerFlags are appended to kube-apiserver's command line,
	// e.g. "--allow-privileged=true" or "--feature-gates=…".
	ExtraAPIServerFlags []string
	// ReadyTimeout bounds the wait for /readyz (default 2 minutes: a cold
	// start on a loaded 2-core machine takes 20–40 s).
	ReadyTimeout time.Duration
	// Logger receives start/stop lines; nil discards them.
	Logger *slog.Logger
}

// ControlPlane is a running etcd + kube-apiserver pair.
type ControlPlane struct {
	// URL is the API server's https address on 127.0.0.1.
	URL string
	// Kubeconfig is a kubeconfig file for the admin user (group
	// system:masters), for tools that take one.
	Kubeconfig string
	// Dir is where data, certificates and logs live.
	Dir string

	caPEM   []byte
	caFile  string
	pki     pki
	token   string
	etcd    *process
	apisrv  *process
	ownDir  bool
	logger  *slog.Logger
	stopped bool
}

// Config returns a fresh admin rest.Config (group system:masters); callers
// may change it. Use rest.ImpersonationConfig to act as a ServiceAccount
// when a test checks RBAC.
func (cp *ControlPlane) Config() *rest.Config {
	return &rest.Config{
		Host:            cp.URL,
		BearerToken:     cp.token,
		TLSClientConfig: rest.TLSClientConfig{CAData: append([]byte(nil), cp.caPEM...)},
		QPS:             100,
		Burst:           200,
	}
}

// Start runs etcd, then kube-apiserver, and waits until /readyz answers.
// On error everything started is stopped again.
func Start(ctx context.Context, bin Binaries, opts Options) (cp *ControlPlane, err error) {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	cp = &ControlPlane{Dir: opts.Dir, logger: logger}
	if cp.Dir == "" {
		if cp.Dir, err = os.MkdirTemp("", "controlplane-"); err != nil {
			return nil, fmt.Errorf("control plane: temporary directory: %w", err)
		}
		cp.ownDir = true
	}
	// Every error return below is `return nil, …`, which sets cp to nil
	// before this runs: stop the one that was started, through its own
	// variable.
	started := cp
	defer func() {
		if err != nil {
			_ = started.Stop()
		}
	}()
	for _, d := range []string{"etcd", "pki"} {
		if err := os.MkdirAll(filepath.Join(cp.Dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("control plane: %w", err)
		}
	}
	ports, err := freePorts(3)
	if err != nil {
		return nil, err
	}
	etcdClient := fmt.Sprintf("http://127.0.0.1:%d", ports[0])
	etcdPeer := fmt.Sprintf("http://127.0.0.1:%d", ports[1])
	cp.URL = fmt.Sprintf("https://127.0.0.1:%d", ports[2])

	cp.etcd, err = startProcess(bin.Etcd, filepath.Join(cp.Dir, "etcd.log"),
		"--name=controlplane",
		"--data-dir="+filepath.Join(cp.Dir, "etcd"),
		"--listen-client-urls="+etcdClient,
		"--advertise-client-urls="+etcdClient,
		"--listen-peer-urls="+etcdPeer,
		"--initial-advertise-peer-urls="+etcdPeer,
		"--initial-cluster=controlplane="+etcdPeer,
		// Test data is thrown away: durability buys nothing and fsync
		// dominates etcd's latency on a shared disk.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	timeout := opts.ReadyTimeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	readyCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := waitHTTP(readyCtx, http.DefaultClient, etcdClient+"/health", `"health":"true"`, cp.etcd); err != nil {
		return nil, fmt.Errorf("etcd did not become healthy: %w", err)
	}
	logger.Info("etcd up", "url", etcdClient)

	pki, err := writePKI(filepath.Join(cp.Dir, "pki"))
	if err != nil {
		return nil, err
	}
	cp.caPEM, cp.caFile, cp.token, cp.pki = pki.caPEM, pki.caFile, pki.token, pki
	args := []string{
		"--etcd-servers=" + etcdClient,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", ports[2]),
		"--cert-dir=" + filepath.Join(cp.Dir, "pki"),
		"--tls-cert-file=" + pki.servingCert,
		"--tls-private-key-file=" + pki.servingKey,
		"--client-ca-file=" + pki.caFile,
		"--token-auth-file=" + pki.tokenFile,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + pki.saKey,
		"--service-account-signing-key-file=" + pki.saKey,
		"--service-cluster-ip-range=10.0.0.0/24",
		"--authorization-mode=RBAC",
		// Without it kube-apiserver refuses a loopback advertise address
		// ("cannot use public IP 127.0.0.1 with endpoint reconciler").
		"--endpoint-reconciler-type=none",
		// For a kubelet started against this API server (test/node):
		// logs and exec reach it with a client certificate it can
		// verify. Which of a node's addresses is dialled stays
		// kube-apiserver's default here: the kubelet stand-ins of the
		// preflight and install tests are reached by Hostname; test/node
		// asks for InternalIP (its ControlPlaneFlags).
		"--kubelet-client-certificate=" + pki.kubeletClientCert,
		"--kubelet-client-key=" + pki.kubeletClientKey,
		"--v=0",
	}
	args = append(args, opts.ExtraAPIServerFlags...)
	cp.apisrv, err = startProcess(bin.KubeAPIServer, filepath.Join(cp.Dir, "kube-apiserver.log"), args...)
	if err != nil {
		return nil, err
	}
	client, err := rest.HTTPClientFor(cp.Config())
	if err != nil {
		return nil, fmt.Errorf("control plane: client: %w", err)
	}
	if err := waitHTTP(readyCtx, client, cp.URL+"/readyz", "ok", cp.apisrv); err != nil {
		return nil, fmt.Errorf("kube-apiserver did not become ready: %w", err)
	}
	cp.Kubeconfig = filepath.Join(cp.Dir, "kubeconfig")
	if err := writeKubeconfig(cp.Kubeconfig, cp.URL, cp.caPEM, cp.token); err != nil {
		return nil, err
	}
	logger.Info("kube-apiserver ready", "url", cp.URL, "dir", cp.Dir)
	return cp, nil
}

// Stop ends kube-apiserver, then etcd, and removes a temporary directory.
// It is safe to call more than once.
func (cp *ControlPlane) Stop() error {
	if cp == nil || cp.stopped {
		return nil
	}
	cp.stopped = true
	var errs []error
	for _, p := range []*process{cp.apisrv, cp.etcd} {
		if p != nil {
			if err := p.stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if cp.ownDir {
		if err := os.RemoveAll(cp.Dir); err != nil {
			errs = append(errs, fmt.Errorf("control plane: remove %s: %w", cp.Dir, err))
		}
	}
	return errors.Join(errs...)
}

// LogTail returns the last n bytes of kube-apiserver's and etcd's logs, for
// a failing test's message.
func (cp *ControlPlane) LogTail(n int) string {
	var b strings.Builder
	for _, name := range []string{"kube-apiserver.log", "etcd.log"} {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", name, tail(filepath.Join(cp.Dir, name), n))
	}
	return b.String()
}

func tail(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

type process struct {
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(bin, logPath string, args ...string) (*process, error) {
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("control plane: log file: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("control plane: start %s: %w", bin, err)
	}
	p := &process{cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logFile.Close()
		close(p.done)
	}()
	return p, nil
}

// exited reports an early exit with the end of the process's log.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited (%v); log %s ends:\n%s", filepath.Base(p.cmd.Path), p.err, p.log, tail(p.log, 2000))
	default:
		return nil
	}
}

func (p *process) stop(grace time.Duration) error {
	select {
	case <-p.done:
		return nil
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
		return fmt.Errorf("control plane: %s ignored SIGTERM for %s; killed", filepath.Base(p.cmd.Path), grace)
	}
}

// waitHTTP polls url until the body contains want, the process exits, or
// ctx ends.
func waitHTTP(ctx context.Context, client *http.Client, url, want string, p *process) error {
	var last string
	for {
		if err := p.exited(); err != nil {
			return err
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && strings.Contains(string(body), want) {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, strings.TrimSpace(string(body)))
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (last answer from %s: %s); log %s ends:\n%s", ctx.Err(), url, last, p.log, tail(p.log, 2000))
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// freePorts asks the kernel for n unused loopback ports. They are released
// before the servers bind them; a collision shows up as a start failure.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("control plane: free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

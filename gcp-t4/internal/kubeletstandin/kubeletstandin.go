// Package kubeletstandin is a kubelet's /configz for tests against a real
// kube-apiserver: an HTTPS server behind the API server's node proxy
// (GET /api/v1/nodes/NODE/proxy/configz). The API server refuses to proxy
// to loopback and link-local addresses, so the stand-in listens on a
// non-loopback address of this machine, adding one to lo (as root) when
// the machine has none. Only tests import it; no binary links it.
package kubeletstandin

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os/exec"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Kubelet serves /configz with a runtimeRequestTimeout.
type Kubelet struct {
	Addr netip.Addr
	Port int32

	mu      sync.Mutex
	timeout string // "" leaves the field out
	refuse  bool
	calls   int
}

// Start serves /configz with runtimeRequestTimeout (a Go duration string;
// "" leaves the field out, as a configuration that does not set it), over
// TLS with a certificate the API server does not verify (the test control
// plane sets no --kubelet-certificate-authority).
func Start(t testing.TB, runtimeRequestTimeout string) *Kubelet {
	t.Helper()
	addr := Address(t)
	l, err := net.Listen("tcp", netip.AddrPortFrom(addr, 0).String())
	if err != nil {
		t.Fatalf("kubelet stand-in: %v", err)
	}
	k := &Kubelet{Addr: addr, timeout: runtimeRequestTimeout}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(k.serve))
	srv.Listener.Close()
	srv.Listener = l
	srv.StartTLS()
	t.Cleanup(srv.Close)
	k.Port = int32(l.Addr().(*net.TCPAddr).Port)
	return k
}

// Set changes the runtimeRequestTimeout served.
func (k *Kubelet) Set(runtimeRequestTimeout string) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.timeout = runtimeRequestTimeout
}

// Refuse makes /configz answer 403 as a kubelet does when its own
// authorization refuses the API server's client (so the 403 comes from
// beyond the API server, not from its RBAC).
func (k *Kubelet) Refuse(refuse bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.refuse = refuse
}

// Calls is how many /configz requests arrived.
func (k *Kubelet) Calls() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.calls
}

func (k *Kubelet) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/configz" {
		http.NotFound(w, r)
		return
	}
	k.mu.Lock()
	k.calls++
	if k.refuse {
		k.mu.Unlock()
		http.Error(w, "Forbidden (user=kube-apiserver-kubelet-client, verb=get, resource=nodes, subresource=configz)", http.StatusForbidden)
		return
	}
	cfg := map[string]any{"kind": "KubeletConfiguration", "apiVersion": "kubelet.config.k8s.io/v1beta1", "syncFrequency": "1m0s"}
	if k.timeout != "" {
		cfg["runtimeRequestTimeout"] = k.timeout
	}
	k.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"kubeletconfig": cfg})
}

// Attach points node's kubelet endpoint at the stand-in, through the
// status subresource as a kubelet writes it: addrType (InternalIP for the
// API server's default preference; Hostname, which it prefers, where the
// test keeps another InternalIP) and the port.
func (k *Kubelet) Attach(ctx context.Context, cs kubernetes.Interface, node string, addrType corev1.NodeAddressType) error {
	return Attach(ctx, cs, node, addrType, k.Addr, k.Port)
}

// Attach points node's kubelet endpoint at addr and port (Kubelet.Attach
// with any address, e.g. a port nothing listens on).
func Attach(ctx context.Context, cs kubernetes.Interface, node string, addrType corev1.NodeAddressType, addr netip.Addr, port int32) error {
	n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return err
	}
	var addrs []corev1.NodeAddress
	for _, a := range n.Status.Addresses {
		if a.Type != addrType {
			addrs = append(addrs, a)
		}
	}
	n.Status.Addresses = append([]corev1.NodeAddress{{Type: addrType, Address: addr.String()}}, addrs...)
	n.Status.DaemonEndpoints.KubeletEndpoint.Port = port
	_, err = cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{})
	return err
}

var (
	once sync.Once
	addr netip.Addr
	err  error
)

// Address is a non-loopback, non-link-local IPv4 address of this machine,
// one added to lo (and left for the test process's life) when it has none.
func Address(t testing.TB) netip.Addr {
	t.Helper()
	once.Do(func() { addr, err = find() })
	if err != nil {
		t.Fatalf("kubelet stand-in: %v", err)
	}
	return addr
}

func find() (netip.Addr, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return netip.Addr{}, err
	}
	for _, i := range ifs {
		if i.Flags&net.FlagUp == 0 {
			continue
		}
		as, err := i.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			p, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			ip, ok := netip.AddrFromSlice(p.IP)
			if ip = ip.Unmap(); ok && ip.Is4() && !ip.IsLoopback() && !ip.IsLinkLocalUnicast() && ip.IsGlobalUnicast() {
				return ip, nil
			}
		}
	}
	// None: add one (198.18.0.0/15 is for tests) to lo; needs root.
	ip := netip.MustParseAddr("198.18.0.77")
	if out, err := exec.Command("ip", "addr", "add", ip.String()+"/32", "dev", "lo").CombinedOutput(); err != nil && !strings.Contains(string(out), "File exists") {
		return netip.Addr{}, fmt.Errorf("this machine has no non-loopback address and adding %s to lo failed (run as root): %v: %s", ip, err, out)
	}
	return ip, nil
}

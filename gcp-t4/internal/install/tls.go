package install

import "errors"

// errCustomTLS is why custom CAA-to-podVM certificates are refused. With
// CACERT_FILE set, upstream CAA (v0.22.0) runs no CA service
// (pkg/adaptor/proxy/factory.go: a CA service only when the TLS config has
// no CA), so it writes no server certificate into the podVM's apf.json
// (pkg/adaptor/cloud/cloud.go: TLSServerCert/TLSServerKey only from the CA
// service), and dials the forwarder as the fixed server name "podvm"
// (proxy.go). Upstream's own podVM images take the forwarder's certificate
// at image build time instead: /etc/certificates/tls.crt, tls.key and
// ca.crt baked in, and TLS_OPTIONS written to
// /etc/default/agent-protocol-forwarder (podvm/misc-settings.sh). The
// gcp-t4 image bakes no key (one key shared by every podVM, readable by
// whoever reads the image) and has no such file, so its forwarder has no
// certificate and every peer pod fails.
var errCustomTLS = errors.New("custom CAA-to-podVM TLS certificates (--tls-ca, --tls-cert, --tls-key) are not supported: with them upstream CAA v0.22.0 sends the podVM no server certificate and expects one baked into the podVM image, which the gcp-t4 image does not have, so every peer pod would fail; CAA generates a CA in memory and a certificate per podVM without them (docs/install.md)")

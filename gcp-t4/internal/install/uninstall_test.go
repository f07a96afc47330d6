package install_test

import (
	"testing"

	"github.com/caa-gcp-t4/gcp-t4/internal/install"
	"github.com/caa-gcp-t4/gcp-t4/internal/uninstall"
)

// TestAgainstAPIServer runs install's scenarios on a real kube-apiserver
// (install.AgainstAPIServer), each installing with install.Main and
// uninstalling with uninstall.Main, as `gcp-t4 install` and `gcp-t4
// uninstall` do.
func TestAgainstAPIServer(t *testing.T) {
	install.AgainstAPIServer(t, uninstall.Main)
}

# The containerd releases the `gcp-t4 remediate` tests run for real: 1.7
# (GKE <= 1.32), 2.0 (GKE 1.33; config version 3) and the newest 2.x (config
# version 4); built from the module proxy by build.sh, cached by version.
# The one place they are set: the Makefile includes this file, and the Go
# tests read it (gcp-t4/internal/containerdversions) unless the Makefile's
# CONTAINERD17_VERSION / CONTAINERD2_VERSIONS env says otherwise. Any 2.x can
# be added on the command line (make test CONTAINERD2="v2.0.14 v2.2.1 v2.4.2").
# The first 2.x must be a 2.0 release, the last the newest. v1.7/go.mod and
# v2.0/go.mod pin the 1.7 and 2.0 releases: keep them in step (build.sh
# refuses a mismatch).
CONTAINERD17 ?= v1.7.29
CONTAINERD2 ?= v2.0.14 v2.4.2

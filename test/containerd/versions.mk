# The containerd releases the `gcp-t4 remediate` tests run for real: 1.7
# (GKE <= 1.32), 2.0 (GKE 1.33) and the newest 2.x; built from the module
# proxy by build.sh, cached by version. The one place they are set: the
# Makefile includes this file, and the Go tests read it
# (gcp-t4/internal/containerdversions) unless the Makefile's
# CONTAINERD17_VERSION / CONTAINERD2_VERSIONS env says otherwise. What the
# sidecar knows of a release is its line's row in the release table
# (gcp-t4/internal/remediate/containerdrelease/releases.go): a release is
# accepted here when its line has a row, and the tests pick releases by the
# facts of their rows, so the two variables are one list. Any release of a
# known line can be added on the command line
# (make test CONTAINERD2="v2.0.14 v2.2.1 v2.4.2"). A line whose go.mod has
# exclude directives (1.7, 2.0) builds from a tool module here,
# v<MAJOR.MINOR>/, whose go.mod pins the release: keep them in step
# (build.sh refuses a mismatch).
CONTAINERD17 ?= v1.7.29
CONTAINERD2 ?= v2.0.14 v2.4.2

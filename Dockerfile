# syntax=docker/dockerfile:1
#
# caa-gcp-t4 image: upstream Cloud API Adaptor at a pinned release with the
# gcp-t4 provider linked in (build tag gcp_t4), and our gcp-t4 operator
# binaries (gcp-t4, and gcp-t4-node for the node sidecar), so CAA and the
# remediation sidecar run from one image. Build with `make image`;
# docs/upstream.md explains the steps.
#
# Pinned versions, defined here once; a test in test/upstream checks them
# against the Makefile's UPSTREAM_RELEASE, UPSTREAM_GO and IMAGE_GO.
ARG UPSTREAM_RELEASE=v0.22.0
# The commit UPSTREAM_RELEASE named when it was pinned: a moved tag fails the build.
ARG UPSTREAM_COMMIT=38d0fcf7c7b787cc7fb9831410a910b37bb3be09
ARG UPSTREAM_REPO=https://github.com/confidential-containers/cloud-api-adaptor
# The Go upstream's release is built with, and the Go our go.work needs.
ARG UPSTREAM_GO_VERSION=1.25.13
ARG GO_VERSION=1.26.8
# debian:trixie-slim, the base upstream's own image uses, multi-arch index.
ARG BASE_IMAGE=debian:trixie-slim@sha256:28de0877c2189802884ccd20f15ee41c203573bd87bb6b883f5f46362d24c5c2

# Our operator binary, and caa-api-check for the patch step.
FROM golang:${GO_VERSION}-trixie AS gcp-t4
ARG VERSION=dev
WORKDIR /src
# go.work.sum when there is one (the glob may match nothing).
COPY go.work go.work.su[m] ./
COPY src/cloud-providers ./src/cloud-providers
COPY gcp-t4 ./gcp-t4
# The kustomize tree, a module of go.work that gcp-t4 embeds (install/embed.go).
COPY install ./install
# The test control plane's package (client-go only; its kube-apiserver and
# etcd tool modules under tools/ stay out): `gcp-t4 emulator`
# starts those binaries where a user built them, and gcp-t4's tests use it.
COPY test/controlplane/go.mod test/controlplane/go.sum test/controlplane/*.go ./test/controlplane/
COPY test/upstream ./test/upstream
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	(cd gcp-t4 && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/ ./cmd/gcp-t4 ./cmd/gcp-t4-node) && \
	cd test/upstream && CGO_ENABLED=0 GOWORK=off go build -trimpath -o /out/caa-api-check ./cmd/caa-api-check && \
	/out/gcp-t4 version && /out/gcp-t4-node version

# Upstream at the pinned release, patched exactly as `make upstream-patch`
# does (API check, gcpt4 tests in upstream's module, registrations, tidy),
# then cloud-api-adaptor built with the gcp_t4 provider alone: upstream's gcp
# provider has none of gcp-t4's allow-lists and caps, so a binary that
# cannot start it is the guard no CLOUD_PROVIDER or command can lift
# (docs/upstream.md). Upstream links each provider by its build tag only
# (cmd/cloud-api-adaptor/<provider>.go, Makefile BUILTIN_CLOUD_PROVIDERS).
FROM golang:${UPSTREAM_GO_VERSION}-trixie AS caa
ARG UPSTREAM_RELEASE
ARG UPSTREAM_COMMIT
ARG UPSTREAM_REPO
WORKDIR /build
RUN git clone --quiet --depth 1 --branch "${UPSTREAM_RELEASE}" "${UPSTREAM_REPO}" upstream && \
	got=$(git -C upstream rev-parse HEAD) && \
	if [ "$got" != "${UPSTREAM_COMMIT}" ]; then \
		echo "${UPSTREAM_RELEASE} is now $got, not the pinned ${UPSTREAM_COMMIT}: review the release and update UPSTREAM_COMMIT" >&2; exit 1; \
	fi
COPY scripts/upstream-patch ./ours/scripts/upstream-patch
COPY src/cloud-providers ./ours/src/cloud-providers
COPY --from=gcp-t4 /out/caa-api-check /usr/local/bin/caa-api-check
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	CAA_API_CHECK=/usr/local/bin/caa-api-check ours/scripts/upstream-patch/patch.sh -o /out/patches -w /build/patched /build/upstream
WORKDIR /build/patched/src/cloud-api-adaptor
RUN --mount=type=cache,target=/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
	cmd=github.com/confidential-containers/cloud-api-adaptor/src/cloud-api-adaptor/cmd && \
	CGO_ENABLED=0 go build -trimpath -tags gcp_t4 \
		-ldflags "-X '${cmd}.VERSION=${UPSTREAM_RELEASE}+gcp-t4' -X '${cmd}.COMMIT=${UPSTREAM_COMMIT}'" \
		-o /out/cloud-api-adaptor ./cmd/cloud-api-adaptor && \
	/out/cloud-api-adaptor help | grep -qw gcp-t4 && \
	! /out/cloud-api-adaptor help | grep -qxE '[[:space:]]*gcp' && \
	sed -n 's/^[[:space:]]*iptables-wrapper:[[:space:]]*//p' versions.yaml > /out/iptables-wrapper.version && \
	test -s /out/iptables-wrapper.version

# CAA drives iptables through the host's backend (legacy or nft); the
# wrapper picks the right one at run time, at the commit upstream pins.
FROM golang:${UPSTREAM_GO_VERSION}-trixie AS iptables-wrapper
COPY --from=caa /out/iptables-wrapper.version /iptables-wrapper.version
RUN git clone --quiet https://github.com/kubernetes-sigs/iptables-wrappers /iptables && \
	cd /iptables && git checkout --quiet "$(cat /iptables-wrapper.version)" && \
	make BIN_DIR=. build && cp iptables-wrapper /iptables-wrapper

FROM ${BASE_IMAGE}
ARG UPSTREAM_RELEASE
ARG UPSTREAM_COMMIT
ARG UPSTREAM_REPO
ARG UPSTREAM_GO_VERSION
ARG GO_VERSION
ARG BASE_IMAGE
ARG VERSION=dev
ARG REVISION=unknown
ARG SOURCE=https://github.com/caa-gcp-t4/caa-gcp-t4
RUN apt-get update && \
	apt-get install -y --no-install-recommends ca-certificates iptables && \
	rm -rf /var/lib/apt/lists/*
COPY --from=iptables-wrapper /iptables-wrapper /usr/sbin/iptables-wrapper
RUN /usr/sbin/iptables-wrapper install
COPY --from=caa /out/cloud-api-adaptor /usr/local/bin/
# Upstream's peerpods chart and install/base run /usr/local/bin/entrypoint.sh;
# ours starts gcp-t4 and refuses any other provider and the TLS settings that
# would lift the guard (upstream's script, which only dispatches, is not kept).
COPY scripts/image/entrypoint.sh /usr/local/bin/entrypoint.sh
COPY --from=gcp-t4 /out/gcp-t4 /out/gcp-t4-node /usr/local/bin/
# The series the binary was built from, for provenance.
COPY --from=caa /out/patches /usr/share/caa-gcp-t4/patches
LABEL org.opencontainers.image.title="caa-gcp-t4" \
	org.opencontainers.image.description="Cloud API Adaptor ${UPSTREAM_RELEASE} with the gcp-t4 provider, and the gcp-t4 operator tool" \
	org.opencontainers.image.licenses="Apache-2.0" \
	org.opencontainers.image.source="${SOURCE}" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${REVISION}" \
	org.opencontainers.image.base.name="${BASE_IMAGE}" \
	io.github.caa-gcp-t4.upstream.source="${UPSTREAM_REPO}" \
	io.github.caa-gcp-t4.upstream.release="${UPSTREAM_RELEASE}" \
	io.github.caa-gcp-t4.upstream.revision="${UPSTREAM_COMMIT}" \
	io.github.caa-gcp-t4.upstream.go="${UPSTREAM_GO_VERSION}" \
	io.github.caa-gcp-t4.go="${GO_VERSION}"
# Root by default, as upstream's image: cloud-api-adaptor sets up VXLAN and
# routes in pod network namespaces and writes the host's /run/peerpod, and
# upstream's peerpods chart adds NET_ADMIN and SYS_ADMIN but sets no
# runAsUser (templates/daemonset.yaml at the pinned release), so a non-root default
# would break the Helm path. Every container install/ starts sets its user
# explicitly (tested), so none depends on this default.
USER 0:0
CMD ["/usr/local/bin/entrypoint.sh"]

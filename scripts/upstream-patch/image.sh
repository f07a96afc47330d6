#!/usr/bin/env bash
# Builds the caa-gcp-t4 image from the repository's Dockerfile with a
# BuildKit engine (the Dockerfile uses RUN --mount), after checking one is
# there, so a machine without one gets a clear answer instead of a stack of
# connection errors.
#
#   image.sh IMAGE_TAG [docker build flags...]     (run from the repository root)
set -euo pipefail
tag=${1:?usage: $0 IMAGE_TAG [docker build flags...]}
shift
cd "$(dirname "$0")/../.."

need="make image needs a Docker engine with BuildKit (Docker Engine 23 or newer, ideally with the buildx plugin)"
if ! command -v docker >/dev/null 2>&1; then
	echo "$need: the docker command is not installed. On Debian: apt-get install docker.io docker-buildx, then start dockerd." >&2
	exit 1
fi
if ! docker info >/dev/null 2>&1; then
	echo "$need: docker is installed but no engine answers at ${DOCKER_HOST:-unix:///var/run/docker.sock} (is dockerd running, and may this user use it?)." >&2
	exit 1
fi
if docker buildx version >/dev/null 2>&1; then
	exec docker buildx build --load -t "$tag" "$@" .
fi
echo "docker buildx is not installed; using the engine's built-in BuildKit (DOCKER_BUILDKIT=1 docker build)" >&2
DOCKER_BUILDKIT=1 exec docker build -t "$tag" "$@" .

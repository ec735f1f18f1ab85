# syntax=docker/dockerfile:1
#
# The compactor image: one static binary on distroless/static (CA certificates, tzdata, a
# non-root user; no shell, no package manager), about the size of the binary. From the
# repository root:
#   docker build --build-arg VERSION=$(git describe --tags --always --dirty) -t compactor .
#   docker run --rm compactor version
# VERSION is what `compactor version` (and the metrics' and traces' version) reports; the
# build context has no .git, so without it the image reports "(devel)".
# Every role runs from it: `serve` with COMPACTOR_ROLES (deploy/compose.yaml,
# deploy/kubernetes), and the client commands (publish, context, status, ...).
#
# No HEALTHCHECK: Docker runs one inside the container, and this image has no shell and no
# HTTP client to run it with, and compactor no command that probes itself. Health is
# served over HTTP instead (COMPACTOR_HTTP_LISTEN: /healthz for liveness, /readyz for
# readiness), which Kubernetes probes from outside the container.

FROM golang:1.26 AS build
WORKDIR /src
# The modules first: a change of the code alone reuses this layer.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# Declared here, after the modules' layer: another VERSION rebuilds from here on only.
ARG VERSION=""
# Static (no cgo, so no libc to match in the final image), reproducible (-trimpath drops
# the builder's paths), stripped (-s -w: no symbol table or DWARF) and versioned (-X
# main.version; empty, the build info's version is reported).
RUN CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/compactor ./cmd/compactor
# The embedded NATS server's data directory (serve without COMPACTOR_NATS_URL), made here
# because the final image has no mkdir.
RUN mkdir -p /out/data

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/compactor /usr/local/bin/compactor
COPY --from=build --chown=65532:65532 /out/data /var/lib/compactor
ENV COMPACTOR_DATA_DIR=/var/lib/compactor
# distroless's nonroot user, by number: Kubernetes' runAsNonRoot can verify a number only.
USER 65532:65532
# 9090: the operators' HTTP listener when COMPACTOR_HTTP_LISTEN=0.0.0.0:9090 (it is off by
# default). 4222: the embedded NATS server, when COMPACTOR_LISTEN=0.0.0.0:4222 (it listens
# on 127.0.0.1 by default, unreachable from outside the container). 8088: the proxy, when
# COMPACTOR_PROXY_LISTEN=0.0.0.0:8088 (compactor proxy listens on 127.0.0.1:8088 by default).
EXPOSE 9090 4222 8088
ENTRYPOINT ["/usr/local/bin/compactor"]
CMD ["serve"]

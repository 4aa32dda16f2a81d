# leaseguard image: a static binary on an empty base, run as a non-root user.
# Build: make docker-build IMG=<your registry>/leaseguard:<tag>
# It holds the production binary only, ./cmd/leaseguard (serve, check,
# manifests, version); the tools (top, vap) are the kubectl plugin,
# ./cmd/kubectl-leaseguard, which is not in the image. Without a Go base
# image to pull: make docker-build-offline (Dockerfile.scratch).
FROM golang:1.26 AS build
WORKDIR /src
# Dependencies first, so source edits do not re-download modules.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# make docker-build passes v$(cat VERSION); without it the binary reports
# "devel" (no VCS stamps here).
ARG VERSION=
# Reproducible: no cgo, no paths or VCS stamps in the binary.
RUN CGO_ENABLED=0 GOOS=linux go build -trimpath -buildvcs=false \
    -ldflags "-s -w -buildid= -X main.version=${VERSION}" \
    -o /out/leaseguard ./cmd/leaseguard

FROM scratch
COPY --from=build /out/leaseguard /leaseguard
# 65532 is the conventional "nonroot" uid/gid of minimal images.
USER 65532:65532
ENTRYPOINT ["/leaseguard"]
CMD ["serve"]

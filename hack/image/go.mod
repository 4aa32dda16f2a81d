// Module image assembles leaseguard's container image without a Docker
// engine, a Dockerfile or a base image (make image, make image-tar): FROM
// scratch images for linux/amd64 and linux/arm64 from the cross-compiled
// binaries, with go-containerregistry, and their OCI image index. A module
// of its own, so go-containerregistry never enters the product's go.mod.
module github.com/leaseguard/leaseguard/hack/image

go 1.26.0

require github.com/google/go-containerregistry v0.22.1

require (
	github.com/klauspost/compress v1.19.2 // indirect
	github.com/opencontainers/go-digest v1.0.0 // indirect
	github.com/opencontainers/image-spec v1.1.1 // indirect
	golang.org/x/sync v0.22.0 // indirect
)

//go:build tools

// Package tools records the main packages the harness builds, so that `go
// mod tidy` keeps them in go.mod: the CNI plugins of the cluster's network.
package tools

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
	_ "github.com/containernetworking/plugins/plugins/main/bridge"
	_ "github.com/containernetworking/plugins/plugins/main/loopback"
	_ "github.com/containernetworking/plugins/plugins/meta/portmap"
)

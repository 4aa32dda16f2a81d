package certs

import "github.com/leaseguard/leaseguard/internal/controlplane"

func buildLeaseguard(dir string) (string, error) { return controlplane.BuildLeaseguard(dir) }

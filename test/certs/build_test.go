package certs

import "github.com/leaseguard/leaseguard/test/controlplane"

func buildLeaseguard(dir string) (string, error) { return controlplane.BuildLeaseguard(dir) }

// Command coredns is CoreDNS with only the plugins the Corefile kubeadm
// writes uses (k8s.io/kubernetes cmd/kubeadm/app/phases/addons/dns), plus
// log and hosts for debugging: the kind node image's DNS, built the way
// CoreDNS documents for a chosen plugin set (its own main importing coremain
// and the plugins) instead of CoreDNS's main, which links every plugin and
// their cloud SDKs — minutes of compiling on a cold cache for nothing the
// cluster uses. A Corefile naming another plugin fails to load with
// "unknown directive", so a kubeadm that starts using one is noticed.
package main

import (
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/caddy/onevent" // as CoreDNS's own plugin list has it
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/forward"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/hosts"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/loop"
	_ "github.com/coredns/coredns/plugin/metrics"
	_ "github.com/coredns/coredns/plugin/ready"
	_ "github.com/coredns/coredns/plugin/reload"
)

func main() { coremain.Run() }

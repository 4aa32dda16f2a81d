// Module dashboard generates leaseguard's Grafana dashboard
// (config/grafana/leaseguard.json) with the Grafana foundation SDK: a module
// of its own, so the SDK never enters the product's go.mod.
module github.com/leaseguard/leaseguard/hack/dashboard

go 1.26.7

require github.com/grafana/grafana-foundation-sdk/go v0.0.22

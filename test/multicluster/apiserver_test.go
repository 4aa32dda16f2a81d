package multicluster

import (
	"context"
	"strings"

	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// webhookCallsOf sums webhookCalls over both clusters.
func webhookCallsOf(ctx context.Context) float64 {
	var sum float64
	for _, c := range env.clusters {
		n, err := c.webhookCalls(ctx)
		Expect(err).NotTo(HaveOccurred())
		sum += n
	}
	return sum
}

// webhookCalls is the API server's own count of its calls to leaseguard's
// webhooks (apiserver_admission_webhook_admission_duration_seconds, every
// webhook named *.leaseguard.io, every operation and verdict): what a
// renewal costs in round trips, counted by the one that makes them.
func (c *cluster) webhookCalls(ctx context.Context) (float64, error) {
	raw, err := c.admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return 0, err
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(raw)))
	if err != nil {
		return 0, err
	}
	var calls float64
	for _, m := range families["apiserver_admission_webhook_admission_duration_seconds"].GetMetric() {
		for _, l := range m.GetLabel() {
			if l.GetName() == "name" && strings.HasSuffix(l.GetValue(), ".leaseguard.io") {
				calls += float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return calls, nil
}

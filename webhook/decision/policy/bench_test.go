package policy

import "testing"

// BenchmarkDecideRenewal measures the hot path: a bound, designated manager
// renewing its own Lease, admitted.
func BenchmarkDecideRenewal(b *testing.B) {
	p, req := renewalFixture(b)
	if d := Decide(p, req); d.Verdict != Allow {
		b.Fatalf("renewal fixture decision %+v, want allow", d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Decide(p, req); d.Verdict != Allow {
			b.Fatal("renewal denied")
		}
	}
}

// BenchmarkDecideDenied measures a denial, which builds its message.
func BenchmarkDecideDenied(b *testing.B) {
	p, req := deniedFixture(b)
	if d := Decide(p, req); d.Verdict != Deny || d.Invariant != InvariantDesignatedWriter {
		b.Fatalf("denied fixture decision %+v, want an I2 denial", d)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if d := Decide(p, req); d.Verdict != Deny {
			b.Fatal("denial admitted")
		}
	}
}

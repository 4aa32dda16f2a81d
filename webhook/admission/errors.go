package admission

import (
	"fmt"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// badRequest prefixes an unreadable-request error so the client sees who
// refused its write and why.
func badRequest(err error) error { return fmt.Errorf("leaseguard: cannot decide: %w", err) }

func admissionResponse(allowed bool, status *metav1.Status) admissionv1.AdmissionResponse {
	return admissionv1.AdmissionResponse{Allowed: allowed, Result: status}
}

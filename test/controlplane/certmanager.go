package controlplane

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
)

// CertManagerVersion is the cert-manager release whose CRDs tests install,
// the same as the cert-manager module leaseguard builds against.
const CertManagerVersion = "v1.21.2"

// CertManagerCRDs returns the Issuer and Certificate CRD files of
// cert-manager's module (deploy/crds), fetched through the Go module proxy
// into the module cache.
func CertManagerCRDs() ([]string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "github.com/cert-manager/cert-manager@"+CertManagerVersion).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download cert-manager %s: %w", CertManagerVersion, err)
	}
	var mod struct{ Dir string }
	if err := json.Unmarshal(out, &mod); err != nil {
		return nil, err
	}
	var files []string
	for _, name := range []string{"cert-manager.io_issuers.yaml", "cert-manager.io_certificates.yaml"} {
		files = append(files, filepath.Join(mod.Dir, "deploy", "crds", name))
	}
	return files, nil
}

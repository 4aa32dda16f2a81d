package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/leaseguard/leaseguard/internal/controlplane"
)

var _ = Describe("the deployable package", func() {
	DescribeTable("renders and the API server accepts every object (server-side dry-run)", func(overlay string, want ...string) {
		root, err := controlplane.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		rendered, err := exec.Command(env.kubectl, "kustomize", filepath.Join(root, overlay)).Output()
		Expect(err).NotTo(HaveOccurred(), "kubectl kustomize "+overlay)

		if env.local {
			By("installing cert-manager's CRDs " + controlplane.CertManagerVersion)
			files, err := controlplane.CertManagerCRDs()
			Expect(err).NotTo(HaveOccurred())
			for _, f := range files {
				out, err := kubectl("apply", "--server-side", "-f", f)
				Expect(err).NotTo(HaveOccurred(), out)
			}
			Eventually(func() error {
				_, err := kubectl("get", "certificates.cert-manager.io", "-A")
				return err
			}).Should(Succeed())
		}

		// A dry-run creates no namespace, so the objects in it need a real one.
		if _, err := kubectl("get", "namespace", "leaseguard-system"); err != nil {
			out, err := kubectl("create", "namespace", "leaseguard-system")
			Expect(err).NotTo(HaveOccurred(), out)
		}
		// Each object on its own: created when new, replaced when it exists
		// (on the local control plane the webhook configurations and the CRD
		// are already installed, pointing at the local server), all dry-run.
		var kinds []string
		accepted := 0
		for i, doc := range bytes.Split(rendered, []byte("\n---\n")) {
			kind := ""
			for _, line := range strings.Split(string(doc), "\n") {
				if strings.HasPrefix(line, "kind: ") {
					kind = strings.TrimPrefix(line, "kind: ")
				}
			}
			if kind == "" {
				continue
			}
			kinds = append(kinds, kind)
			f := filepath.Join(env.tmp, fmt.Sprintf("install-%02d.yaml", i))
			Expect(os.WriteFile(f, doc, 0o600)).To(Succeed())
			out, err := kubectl("create", "--dry-run=server", "-f", f)
			if err != nil && strings.Contains(out, "AlreadyExists") {
				out, err = kubectl("replace", "--dry-run=server", "-f", f)
			}
			Expect(err).NotTo(HaveOccurred(), "%s rejected:\n%s", kind, out)
			Expect(out).To(ContainSubstring("(server dry run)"))
			accepted++
		}
		Expect(kinds).To(ContainElements(want))
		Expect(accepted).To(Equal(len(kinds)))
	},
		Entry("config/default (cert-manager)", "config/default", "Namespace", "CustomResourceDefinition", "ServiceAccount", "ConfigMap", "Service",
			"Deployment", "PodDisruptionBudget", "Issuer", "Certificate", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
		Entry("config/self-managed", "config/self-managed", "Namespace", "ServiceAccount", "ConfigMap", "Service", "Deployment",
			"Role", "RoleBinding", "ClusterRole", "ClusterRoleBinding", "ValidatingWebhookConfiguration", "MutatingWebhookConfiguration"),
	)

	It("runs its Deployment under the restricted security settings", func() {
		root, err := controlplane.RepoRoot()
		Expect(err).NotTo(HaveOccurred())
		rendered, err := exec.Command(env.kubectl, "kustomize", filepath.Join(root, "config", "default")).Output()
		Expect(err).NotTo(HaveOccurred())
		text := string(rendered)
		for _, want := range []string{"runAsNonRoot: true", "readOnlyRootFilesystem: true", "allowPrivilegeEscalation: false",
			"- ALL", "type: RuntimeDefault", "replicas: 2", "podAntiAffinity", "kind: PodDisruptionBudget",
			"cert-manager.io/inject-ca-from: leaseguard-system/leaseguard-serving-cert", "automountServiceAccountToken: false"} {
			Expect(text).To(ContainSubstring(want))
		}
	})
})
